//! The admission webhook end to end: the real kube-apiserver of deploy/local
//! calls the real `nodegate run` over TLS, with certificates nodegate issues
//! and keeps in a Secret (issue 14, scenarios a, d and f).
//!
//! The webhook configurations here use `failurePolicy: Fail`, so a create
//! that the webhook did not answer (TLS refused, nothing listening) fails
//! the create itself: "every create returns tainted" then means "no
//! admission failed".

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use support::gate::{DsSpec, Env, TAINT, has_gate_taint, taint_keys};
use support::{Nodegate, fake_node, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET_NS: &str = "nodegate";
const SECRET: &str = "nodegate-webhook";
const CONFIG: &str = "nodegate-e2e";

/// A port free now on 127.0.0.1 (the API server must be told it before
/// nodegate binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A MutatingWebhookConfiguration with one webhook per port, all on Node
/// CREATE, no caBundle (nodegate fills it).
async fn register(env: &Env, ports: &[u16]) -> Api<MutatingWebhookConfiguration> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(env.cluster.client.clone());
    let webhooks: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            json!({
                "name": format!("r{i}.nodes.nodegate.dev"),
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-node")},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nodes"]}],
                "failurePolicy": "Fail",
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

fn webhook_args(port: u16, validity: &str) -> Vec<String> {
    [
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-cert-secret",
        &format!("{SECRET_NS}/{SECRET}"),
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

/// Waits until every webhook of the configuration has a caBundle; returns it.
async fn wait_bundle(api: &Api<MutatingWebhookConfiguration>, logs: &[&Nodegate]) -> Vec<u8> {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(c) = api.get(CONFIG).await {
                let bundles: Vec<Option<Vec<u8>>> = c
                    .webhooks
                    .iter()
                    .flatten()
                    .map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()))
                    .collect();
                if let Some(Some(first)) = bundles.first()
                    && bundles.iter().all(|b| b.as_ref() == Some(first))
                {
                    return first.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!(
            "no caBundle on every webhook within 30s\n{}",
            logs.iter()
                .map(|n| n.logs())
                .collect::<Vec<_>>()
                .join("\n----\n")
        )
    })
}

/// A fake node with no `spec.taints` at all.
fn untainted(name: &str) -> Node {
    let mut n = fake_node(name, &[], &[]);
    if let Some(spec) = n.spec.as_mut() {
        spec.taints = None;
    }
    n
}

/// Creates probe nodes until one is admitted (the API server has loaded the
/// caBundle); returns how long that took.
async fn wait_admitting(env: &Env, logs: &[&Nodegate]) -> Duration {
    let start = Instant::now();
    let mut i = 0;
    loop {
        i += 1;
        match env
            .nodes
            .create(&PostParams::default(), &untainted(&format!("probe-{i}")))
            .await
        {
            Ok(_) => return start.elapsed(),
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                eprintln!("probe {i} not admitted yet: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!(
                "the API server could not call the webhook within 20s: {e}\n{}",
                logs.iter()
                    .map(|n| n.logs())
                    .collect::<Vec<_>>()
                    .join("\n----\n")
            ),
        }
    }
}

/// `nodegate_webhook_admissions_total{result}` in a /metrics page; -1
/// when the series is missing.
fn admissions(metrics: &str, result: &str) -> f64 {
    support::metric(
        metrics,
        &format!("nodegate_webhook_admissions_total{{result=\"{result}\"}}"),
    )
    .unwrap_or(-1.0)
}

fn client_config(ca_pem: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.expect("CA PEM")).expect("CA accepted");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// One HTTPS request to the webhook, verified against `ca_pem`: the served
/// certificate (DER) and the raw HTTP answer.
async fn https(port: u16, ca_pem: &[u8], request: &[u8]) -> (Vec<u8>, String) {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the webhook");
    let connector = tokio_rustls::TlsConnector::from(client_config(ca_pem));
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let mut tls = connector
        .connect(name, tcp)
        .await
        .expect("TLS handshake verified by the Secret's CA");
    let served = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .expect("a served certificate");
    tls.write_all(request).await.expect("send");
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut raw)).await;
    (served, String::from_utf8_lossy(&raw).to_string())
}

fn post(body: &str) -> Vec<u8> {
    format!(
        "POST /mutate-node HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn secret(env: &Env) -> Secret {
    let api: Api<Secret> = Api::namespaced(env.cluster.client.clone(), SECRET_NS);
    api.get(SECRET).await.expect("the webhook Secret")
}

fn data(s: &Secret, key: &str) -> Vec<u8> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

fn der_of(pem: &[u8]) -> Vec<u8> {
    CertificateDer::pem_slice_iter(pem)
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

/// (a) A Node created through the API without a taint comes back from the
/// create with the startup taint, and is then gated and opened as usual.
/// (f) A garbage AdmissionReview posted to the webhook is answered 200,
/// allowed, with a warning: never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_created_without_a_taint_is_tainted_at_admission_then_opened() {
    let env = Env::new("webhook-admit").await;
    env.cluster.namespace(SECRET_NS).await;
    env.create_ds(DsSpec::new("cni")).await;
    let port = free_port();
    let configs = register(&env, &[port]).await;
    let args = webhook_args(port, "1h");
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let bundle = wait_bundle(&configs, &[&ng]).await;
    let took = wait_admitting(&env, &[&ng]).await;
    eprintln!("the API server called the webhook after {took:?}");

    let created = env
        .nodes
        .create(&PostParams::default(), &untainted("node-a"))
        .await
        .unwrap_or_else(|e| panic!("create node-a: {e}\n{}", ng.logs()));
    // (The API server's own admission adds node.kubernetes.io/not-ready too.)
    assert!(
        has_gate_taint(&created),
        "the create must return the startup taint, got {:?}\n{}",
        taint_keys(&created),
        ng.logs()
    );
    // A node that brings other taints keeps them and gets ours appended.
    let other = env
        .nodes
        .create(
            &PostParams::default(),
            &fake_node("node-b", &[], &[("example.com/other", "", "NoSchedule")]),
        )
        .await
        .expect("create node-b");
    let keys = taint_keys(&other);
    let at = |k: &str| keys.iter().position(|t| t == k);
    assert!(
        at("example.com/other").is_some() && at("example.com/other") < at(TAINT),
        "node-b keeps its taint and gets the startup taint after it: {keys:?}"
    );
    env.wait_pod("cni", "node-a", true).await;
    env.wait_open("node-a", Duration::from_secs(30), &[&ng])
        .await;
    assert!(!has_gate_taint(&env.node("node-a").await));

    // (f) Garbage straight to the webhook, over TLS verified by the CA the
    // caBundle carries.
    let http_addr = ng.http_addr(Duration::from_secs(5));
    for body in [
        "this is not json",
        "{\"request\": {\"uid\": \"u-7\", \"kind\": 3}}",
    ] {
        let (_, answer) = https(port, &bundle, &post(body)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let json_body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        let v: serde_json::Value =
            serde_json::from_str(json_body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"));
        assert_eq!(v["kind"], "AdmissionReview", "{v}");
        assert_eq!(v["response"]["allowed"], true, "{v}");
        assert!(
            v["response"]["warnings"][0]
                .as_str()
                .is_some_and(|w| w.contains("admitted this object unchanged")),
            "{v}"
        );
    }
    let (_, answer) = https(port, &bundle, &post("{\"request\": {\"uid\": \"u-7\"}}")).await;
    assert!(
        answer.contains("\"uid\":\"u-7\""),
        "the uid is kept: {answer}"
    );

    let (_, metrics) = support::http_get(&http_addr, "/metrics")
        .await
        .expect("metrics");
    let count = |r: &str| admissions(&metrics, r);
    assert!(count("tainted") >= 2.0, "{metrics}");
    assert_eq!(count("error"), 3.0, "{metrics}");
    assert!(
        support::metric(
            &metrics,
            "nodegate_webhook_certificate_expiry_timestamp_seconds"
        )
        .is_some_and(|v| v > 1e9),
        "{metrics}"
    );
}

/// A trial install (`--dry-run`) writes nothing, at admission either: a
/// node the webhook would taint comes back from the real API server's CREATE
/// as it was sent, and the answer is counted as `would_taint`. (A node the
/// webhook tainted would stay closed: a dry-run gate never opens it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_admits_new_nodes_unchanged() {
    let env = Env::new("webhook-dry-run").await;
    env.cluster.namespace(SECRET_NS).await;
    let port = free_port();
    let configs = register(&env, &[port]).await;
    let mut args = webhook_args(port, "1h");
    args.push("--dry-run".into());
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_bundle(&configs, &[&ng]).await;
    wait_admitting(&env, &[&ng]).await;
    let created = env
        .nodes
        .create(&PostParams::default(), &untainted("node-a"))
        .await
        .unwrap_or_else(|e| panic!("create node-a: {e}\n{}", ng.logs()));
    assert!(
        !has_gate_taint(&created),
        "a dry run must not taint at admission, got {:?}\n{}",
        taint_keys(&created),
        ng.logs()
    );
    let http_addr = ng.http_addr(Duration::from_secs(5));
    let (_, metrics) = support::http_get(&http_addr, "/metrics")
        .await
        .expect("metrics");
    let count = |r: &str| admissions(&metrics, r);
    // The probes that found the webhook answering, and node-a.
    assert!(count("would_taint") >= 2.0, "{metrics}");
    assert_eq!(count("tainted"), 0.0, "{metrics}");
}

/// (d) Two replicas started at once over the Secret the manifests ship
/// (empty) converge on one certificate, both serve it, the caBundle of both
/// webhooks is set; with a 60 s validity the certificate is renewed at about
/// 40 s while nodes are created every half second, and every create comes
/// back tainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_certificate_and_rotate_it_without_a_failed_admission() {
    let env = Env::new("webhook-rotate").await;
    env.cluster.namespace(SECRET_NS).await;
    let secrets: Api<Secret> = Api::namespaced(env.cluster.client.clone(), SECRET_NS);
    let shipped: Secret = serde_json::from_value(json!({
        "metadata": {"name": SECRET, "namespace": SECRET_NS},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "", "tls.key": ""},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &shipped)
        .await
        .expect("create the empty Secret");
    let ports = [free_port(), free_port()];
    let configs = register(&env, &ports).await;
    let election = [
        "--leader-elect",
        "--lease-name",
        "nodegate-webhook-e2e",
        "--lease-namespace",
        "default",
    ];
    let start = |port: u16| {
        let mut args = webhook_args(port, "60s");
        args.extend(election.iter().map(|s| s.to_string()));
        Nodegate::start(
            &env.cluster,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let (a, b) = (start(ports[0]), start(ports[1]));
    let logs = [&a, &b];
    let bundle = wait_bundle(&configs, &logs).await;
    wait_admitting(&env, &logs).await;

    let first = secret(&env).await;
    assert_eq!(
        data(&first, "ca.crt"),
        bundle,
        "the caBundle is the Secret's CA"
    );
    let first_crt = der_of(&data(&first, "tls.crt"));
    // Both replicas serve the Secret's certificate (one issued, the other
    // took it).
    for port in ports {
        let (served, _) = https(port, &bundle, &post("{}")).await;
        assert_eq!(
            served, first_crt,
            "replica on {port} serves another certificate"
        );
    }
    let issued = logs
        .iter()
        .map(|n| n.logs().matches("wrote new certificates").count())
        .sum::<usize>();
    assert_eq!(
        issued, 1,
        "exactly one replica issued the first certificate"
    );

    let (_, first_parsed) =
        x509_parser::parse_x509_certificate(&first_crt).expect("the served certificate parses");
    let first_expiry = first_parsed.validity().not_after.timestamp();

    // Nodes created continuously across the renewal, and a fresh TLS
    // handshake with each replica every round (the API server keeps its
    // connections, so only new ones show what a replica serves now).
    let started = Instant::now();
    let mut rotated_at = None;
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(75) {
        i += 1;
        let name = format!("n-{i}");
        let created = env
            .nodes
            .create(&PostParams::default(), &untainted(&name))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create {name} failed after {:?} (a failed admission): {e}\n{}",
                    started.elapsed(),
                    a.logs() + "\n----\n" + &b.logs()
                )
            });
        assert!(has_gate_taint(&created), "{name} came back untainted");
        for port in ports {
            https(port, &bundle, &post("{}")).await;
        }
        let now_crt = der_of(&data(&secret(&env).await, "tls.crt"));
        if rotated_at.is_none() && now_crt != first_crt {
            rotated_at = Some(started.elapsed());
            // Renewed with a third of the validity left (20 s), not at expiry.
            let left = first_expiry - jiff::Timestamp::now().as_second();
            assert!(
                left >= 10,
                "renewed only {left}s before the old certificate expired\n{}",
                a.logs()
            );
            eprintln!("renewed after {:?}, {i} nodes so far", started.elapsed());
        }
        if let Some(at) = rotated_at
            && started.elapsed() > at + Duration::from_secs(10)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        rotated_at.is_some(),
        "the certificate was not renewed within 75s\n{}",
        a.logs()
    );
    let renewed = secret(&env).await;
    assert_eq!(
        data(&renewed, "ca.crt"),
        bundle,
        "same CA after a serving renewal"
    );
    let renewed_crt = der_of(&data(&renewed, "tls.crt"));
    wait_for(
        "both replicas serving the renewed certificate",
        Duration::from_secs(15),
        || async {
            for port in ports {
                let (served, _) = https(port, &bundle, &post("{}")).await;
                if served != renewed_crt {
                    return Err(format!("replica on {port} still serves the old one"));
                }
            }
            Ok(())
        },
    )
    .await;
    eprintln!("{i} nodes created, every one tainted at admission");

    // An upgrade that re-applies the configuration blanks the caBundle of
    // one webhook: the replicas write it back within a period or two.
    configs
        .patch(
            CONFIG,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "remove", "path": "/webhooks/1/clientConfig/caBundle"}
                ]))
                .expect("patch"),
            ),
        )
        .await
        .expect("blank the caBundle");
    let repaired = wait_bundle(&configs, &logs).await;
    assert_eq!(repaired, bundle, "the blanked caBundle is written back");
}
