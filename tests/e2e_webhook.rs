//! The admission webhook end to end: the real kube-apiserver of deploy/local
//! calls the real `nodegate run` over TLS, with certificates nodegate issues
//! and keeps in a Secret (issue 14, scenarios a, d and f).
//!
//! The webhook configurations here use `failurePolicy: Fail`, so a create
//! that the webhook did not answer (TLS refused, nothing listening) fails
//! the create itself: "every create returns tainted" then means "no
//! admission failed".

use nodegate_e2e as support;

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

/// VmRSS and VmHWM (peak) of process `pid`, in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(-1.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A TLS connection to the webhook that sends nothing after the handshake;
/// `None` when the connection was refused or closed during the handshake
/// (the listener was full).
async fn idle_tls(
    port: u16,
    ca_pem: &[u8],
) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let connector = tokio_rustls::TlsConnector::from(client_config(ca_pem));
    let name = ServerName::try_from("127.0.0.1").ok()?;
    tokio::time::timeout(Duration::from_secs(20), connector.connect(name, tcp))
        .await
        .ok()?
        .ok()
}

/// Waits until the server closes `stream` (EOF or an error); false if it is
/// still open after `within`.
async fn closed_by_server<S: tokio::io::AsyncRead + Unpin>(
    mut stream: S,
    within: Duration,
) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends `request` over TLS while reading the answer: a server that
/// answers before reading the whole body (and closes) is not an error.
async fn post_unread(port: u16, ca_pem: &[u8], request: Vec<u8>) -> String {
    let tls = idle_tls(port, ca_pem)
        .await
        .expect("TLS handshake with the webhook");
    let (mut rx, mut tx) = tokio::io::split(tls);
    let send = tokio::spawn(async move {
        let _ = tx.write_all(&request).await;
        tx
    });
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), rx.read_to_end(&mut raw)).await;
    send.abort();
    String::from_utf8_lossy(&raw).to_string()
}

/// A review of just under 3 MiB (the largest body nodegate used to read): a
/// Node CREATE with an array of 1.5 million numbers in an unknown field.
fn oversized_review(i: usize) -> String {
    let pad = vec!["0"; ((3 << 20) - 4096) / 2].join(",");
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"big-{i}","kind":{{"group":"","version":"v1","kind":"Node"}},"operation":"CREATE","object":{{"metadata":{{"name":"big-{i}"}},"spec":{{"pad":[{pad}]}}}}}}}}"#
    )
}

/// A cluster with one nodegate serving the webhook (deadline 1h), once it
/// admits: the cluster, the replica, the CA bundle and the webhook's port.
async fn one_webhook(name: &str) -> (Env, Nodegate, Vec<u8>, u16) {
    let env = Env::new(name).await;
    env.cluster.namespace(SECRET_NS).await;
    let port = free_port();
    let configs = register(&env, &[port]).await;
    let args = webhook_args(port, "1h");
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let bundle = wait_bundle(&configs, &[&ng]).await;
    wait_admitting(&env, &[&ng]).await;
    (env, ng, bundle, port)
}

/// The webhook flood (chaos): 8 concurrent 3 MiB reviews and 2,000 idle TLS
/// connections against the webhook, and 500 idle connections against
/// `--http-addr`. nodegate's memory stays bounded, `/healthz` keeps
/// answering, the idle connections are closed by the server, Node CREATEs
/// through the real API server still come back tainted, and text in a
/// review cannot forge a log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_flood_leaves_nodegate_bounded_and_answering() {
    let (env, ng, bundle, port) = one_webhook("webhook-flood").await;
    let http_addr = ng.http_addr(Duration::from_secs(5));
    let pid = ng.pid();
    eprintln!("before the flood: (VmRSS, VmHWM) = {:?} MiB", rss_mib(pid));

    // 8 concurrent oversized reviews.
    let big: Vec<_> = (0..8)
        .map(|i| {
            let bundle = bundle.clone();
            tokio::spawn(
                async move { post_unread(port, &bundle, post(&oversized_review(i))).await },
            )
        })
        .collect();
    for (i, b) in big.into_iter().enumerate() {
        let answer = b.await.expect("oversized review task");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains(&format!("\"uid\":\"big-{i}\"")) && answer.contains("\"allowed\":true"),
            "an oversized review is admitted unchanged, its uid kept: {answer}"
        );
        assert!(!answer.contains("\"patch\""), "{answer}");
    }
    let (code, _) = support::http_get(&http_addr, "/healthz")
        .await
        .expect("/healthz after the oversized reviews");
    assert_eq!(code, 200);
    let (rss, peak) = rss_mib(pid);
    eprintln!("after the oversized reviews: VmRSS {rss:.0} MiB, VmHWM {peak:.0} MiB");
    assert!(
        peak > 0.0 && peak < 128.0,
        "nodegate's peak RSS was {peak:.0} MiB during the flood (bound 128 MiB)"
    );

    // L1: text in a review cannot start a log line of its own.
    let forged = r#"{"request":{"uid":"u-9","kind":{"group":"","version":"v1","kind":"Node"},"operation":"X\nINFO forged line","object":{"metadata":{"name":"n"}}}}"#;
    let (_, answer) = https(port, &bundle, &post(forged)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // 500 idle connections to --http-addr.
    let mut idle_http = Vec::new();
    for _ in 0..500 {
        idle_http.push(
            tokio::net::TcpStream::connect(&http_addr)
                .await
                .expect("connect to --http-addr"),
        );
    }
    // 2,000 idle TLS connections to the webhook, 100 handshakes at a time.
    let mut idle_tls_conns = Vec::new();
    for chunk in 0..20 {
        let batch: Vec<_> = (0..100)
            .map(|_| {
                let bundle = bundle.clone();
                tokio::spawn(async move { idle_tls(port, &bundle).await })
            })
            .collect();
        for b in batch {
            if let Some(c) = b.await.expect("handshake task") {
                idle_tls_conns.push(c);
            }
        }
        if chunk == 9 {
            let (code, _) = support::http_get(&http_addr, "/healthz")
                .await
                .expect("/healthz during the flood");
            assert_eq!(code, 200, "/healthz during the flood");
        }
    }
    eprintln!(
        "{} idle TLS connections open (the rest closed at once: the cap); (VmRSS, VmHWM) = {:?} MiB",
        idle_tls_conns.len(),
        rss_mib(pid)
    );
    let (rss, peak) = rss_mib(pid);
    assert!(
        peak > 0.0 && peak < 128.0,
        "nodegate's peak RSS was {peak:.0} MiB with the idle connections (bound 128 MiB)"
    );
    eprintln!("at the end of the flood: VmRSS {rss:.0} MiB");
    // The idle connections are closed by the server (head timeout 10 s).
    let closing: Vec<_> = idle_tls_conns
        .into_iter()
        .map(|c| tokio::spawn(closed_by_server(c, Duration::from_secs(30))))
        .chain(
            idle_http
                .into_iter()
                .map(|c| tokio::spawn(closed_by_server(c, Duration::from_secs(30)))),
        )
        .collect();
    let mut still_open = 0;
    for c in closing {
        if !c.await.expect("close task") {
            still_open += 1;
        }
    }
    assert_eq!(still_open, 0, "idle connections left open after 30 s");

    let created = env
        .nodes
        .create(&PostParams::default(), &untainted("after-flood"))
        .await
        .unwrap_or_else(|e| panic!("create after the flood: {e}\n{}", ng.logs()));
    assert!(has_gate_taint(&created), "{:?}", taint_keys(&created));
    let (_, metrics) = support::http_get(&http_addr, "/metrics")
        .await
        .expect("metrics");
    assert_eq!(admissions(&metrics, "busy"), 8.0, "{metrics}");

    let logs = ng.logs();
    assert!(
        !logs
            .lines()
            .any(|l| l.trim_start().starts_with("INFO forged")),
        "a review forged a log line:\n{logs}"
    );
    assert!(
        logs.contains("X\\\\nINFO forged line") || logs.contains("X\\nINFO forged line"),
        "{logs}"
    );
}

/// Clients that send a review's head and trickle its body hold nothing the
/// API server's reviews need: with 32 of them sending a byte a second, a
/// Node CREATE through the real API server still comes back tainted (a
/// review is read before it takes a place to be judged, and a body not
/// whole within 2 s is given up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_review_bodies_cannot_make_the_webhook_admit_unchanged() {
    let (env, ng, bundle, port) = one_webhook("webhook-slow-bodies").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tricklers = Vec::new();
    for _ in 0..32 {
        let (bundle, stop) = (bundle.clone(), Arc::clone(&stop));
        tricklers.push(tokio::spawn(async move {
            // Each reconnects as soon as the server gives it up, so that
            // all 32 are always trickling.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(mut tls) = idle_tls(port, &bundle).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let head = "POST /mutate-node HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{";
                if tls.write_all(head.as_bytes()).await.is_err() {
                    continue;
                }
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if tls.write_all(b" ").await.is_err() {
                        break;
                    }
                }
            }
        }));
    }
    // Let every trickler be mid-body.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut results = Vec::new();
    for i in 0..3 {
        let created = env
            .nodes
            .create(
                &PostParams::default(),
                &untainted(&format!("beside-slow-{i}")),
            )
            .await
            .unwrap_or_else(|e| panic!("create beside the slow bodies: {e}\n{}", ng.logs()));
        results.push((i, has_gate_taint(&created), taint_keys(&created)));
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tricklers {
        t.abort();
    }
    for (i, tainted, keys) in results {
        assert!(
            tainted,
            "node beside-slow-{i} was admitted without the taint while slow clients held the webhook: {keys:?}\n{}",
            ng.logs()
        );
    }
}

/// A client for the same cluster acting as the kubelet of `node`
/// (impersonation: user `system:node:NODE`, group `system:nodes`).
async fn as_kubelet(env: &Env, node: &str) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&env.cluster.kubeconfig).expect("the test kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("a client config");
    config.auth_info.impersonate = Some(format!("system:node:{node}"));
    config.auth_info.impersonate_groups =
        Some(vec!["system:nodes".into(), "system:authenticated".into()]);
    kube::Client::try_from(config).expect("an impersonating client")
}

/// §11: a kubelet registering its own Node cannot exempt it
/// (`nodegate.dev/ignore`) or date its gate (`gated-since`, `opened-by`):
/// through the real API server, with the node's own identity, the Node
/// comes back tainted and without those annotations; the same annotation
/// from an administrator is honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_cannot_exempt_or_date_its_own_gate_at_registration() {
    let env = Env::new("webhook-kubelet").await;
    env.cluster.namespace(SECRET_NS).await;
    let port = free_port();
    let configs = register(&env, &[port]).await;
    let args = webhook_args(port, "1h");
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_bundle(&configs, &[&ng]).await;
    wait_admitting(&env, &[&ng]).await;
    let with_annotations = |name: &str| {
        let mut n = untainted(name);
        n.metadata.annotations = Some(
            [
                ("nodegate.dev/ignore", "true"),
                ("nodegate.dev/gated-since", "2000-01-01T00:00:00Z"),
                ("nodegate.dev/opened-by", "manual"),
                ("example.com/kept", "yes"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        n
    };
    let kubelet: Api<Node> = Api::all(as_kubelet(&env, "n1").await);
    let created = kubelet
        .create(&PostParams::default(), &with_annotations("n1"))
        .await
        .unwrap_or_else(|e| panic!("create n1 as its kubelet: {e}\n{}", ng.logs()));
    assert!(
        has_gate_taint(&created),
        "a kubelet's own ignore annotation must not skip the gate: {:?}\n{}",
        taint_keys(&created),
        ng.logs()
    );
    let kept: Vec<String> = created
        .metadata
        .annotations
        .unwrap_or_default()
        .into_keys()
        .collect();
    assert_eq!(
        kept,
        ["example.com/kept"],
        "nodegate.dev/* annotations removed"
    );
    // An administrator may still exempt a node.
    let admin = env
        .nodes
        .create(&PostParams::default(), &with_annotations("n2"))
        .await
        .expect("create n2 as admin");
    assert!(!has_gate_taint(&admin), "{:?}", taint_keys(&admin));
}

/// §16: with a Lease held by a holder that never renews (and that this
/// replica may not take), no leader is known after 2 × --lease-duration:
/// the webhook then admits new nodes unchanged (counted `no_leader`),
/// `nodegate_leader_known` is 0 and `/readyz?verbose` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_leader_the_webhook_admits_unchanged_and_readiness_says_why() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = Env::new("webhook-no-leader").await;
    env.cluster.namespace(SECRET_NS).await;
    let leases: Api<Lease> = Api::namespaced(env.cluster.client.clone(), "default");
    let stale: Lease = serde_json::from_value(json!({
        "metadata": {"name": "stale-lease", "namespace": "default"},
        "spec": {
            "holderIdentity": "gone_0000",
            "leaseDurationSeconds": 3600,
            "renewTime": jiff::Timestamp::now().to_string(),
        },
    }))
    .expect("lease");
    leases
        .create(&PostParams::default(), &stale)
        .await
        .expect("create the stale lease");
    let port = free_port();
    let configs = register(&env, &[port]).await;
    let mut args = webhook_args(port, "1h");
    args.extend(
        [
            "--leader-elect",
            "--lease-name",
            "stale-lease",
            "--lease-namespace",
            "default",
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "500ms",
        ]
        .map(String::from),
    );
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_bundle(&configs, &[&ng]).await;
    wait_admitting(&env, &[&ng]).await;
    let http_addr = ng.http_addr(Duration::from_secs(5));
    let readyz = wait_for(
        "/readyz?verbose to say no leader is known",
        Duration::from_secs(30),
        || async {
            let (code, text) = support::http_get(&http_addr, "/readyz?verbose").await?;
            if text.contains("[!]leader ") {
                Ok((code, text))
            } else {
                Err(format!("{code}: {text}"))
            }
        },
    )
    .await;
    eprintln!("{}", readyz.1);
    assert!(
        readyz.1.contains("stale-lease") && readyz.1.contains("gone_0000"),
        "{}",
        readyz.1
    );
    let created = env
        .nodes
        .create(&PostParams::default(), &untainted("no-leader"))
        .await
        .unwrap_or_else(|e| panic!("create: {e}\n{}", ng.logs()));
    assert!(
        !has_gate_taint(&created),
        "with no leader nothing would open the node; it must not be tainted: {:?}\n{}",
        taint_keys(&created),
        ng.logs()
    );
    let (_, metrics) = support::http_get(&http_addr, "/metrics")
        .await
        .expect("metrics");
    assert!(admissions(&metrics, "no_leader") >= 1.0, "{metrics}");
    assert_eq!(
        support::metric(&metrics, "nodegate_leader_known"),
        Some(0.0),
        "{metrics}"
    );
}

/// §19: idle connections to `--http-addr` cannot hold the probes' listener:
/// with 800 of them open `/healthz` answers, and the server closes them
/// (3 s for a first request head) rather than keeping them for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_the_http_listener_are_closed_and_healthz_answers() {
    let env = Env::new("http-idle").await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    let http_addr = ng.http_addr(Duration::from_secs(10));
    let mut idle = Vec::new();
    for _ in 0..800 {
        idle.push(
            tokio::net::TcpStream::connect(&http_addr)
                .await
                .expect("connect to --http-addr"),
        );
    }
    let (code, body) = support::http_get(&http_addr, "/healthz")
        .await
        .expect("/healthz with 800 idle connections open");
    assert_eq!(code, 200, "{body}");
    let closing: Vec<_> = idle
        .into_iter()
        .map(|c| tokio::spawn(closed_by_server(c, Duration::from_secs(30))))
        .collect();
    let mut still_open = 0;
    for c in closing {
        if !c.await.expect("close task") {
            still_open += 1;
        }
    }
    assert_eq!(
        still_open, 0,
        "idle connections to --http-addr left open after 30 s"
    );
}

/// The webhook's answers counted `result` so far (a fresh page: /metrics
/// pages are shared for a second).
async fn admissions_now(ng: &Nodegate, result: &str) -> f64 {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let addr = ng.http_addr(Duration::from_secs(5));
    let (_, text) = support::http_get(&addr, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("metrics: {e}"));
    admissions(&text, result)
}

/// With the shipped admission policy and the webhook both installed, a new
/// node gets the startup taint once, whichever of the two runs first: each
/// adds nothing to a node that already carries a managed taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_the_admission_policy_and_the_webhook_a_node_gets_one_taint() {
    let env = Env::new("webhook-and-policy").await;
    env.cluster.namespace(SECRET_NS).await;
    for file in [
        "deploy/kustomize/base/namespace.yaml",
        "deploy/kustomize/base/startup-taint.yaml",
    ] {
        let path = support::repo_root().join(file);
        let out = env
            .cluster
            .kubectl(&["apply", "-f", &path.to_string_lossy()]);
        assert!(
            !out.to_lowercase().contains("error"),
            "kubectl apply -f {file}: {out}"
        );
    }
    support::write_default_admission_params(&env.cluster.client).await;
    // The policy is in force before the webhook exists: a dry-run create
    // (nothing stored) comes back tainted.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("the policy to apply", Duration::from_secs(30), || async {
        let made = env
            .nodes
            .create(&dry, &untainted("policy-probe"))
            .await
            .map_err(|e| e.to_string())?;
        if has_gate_taint(&made) {
            Ok(())
        } else {
            Err(format!("{:?}", taint_keys(&made)))
        }
    })
    .await;
    let port = free_port();
    let configs = register(&env, &[port]).await;
    let args = webhook_args(port, "1h");
    let ng = Nodegate::start(
        &env.cluster,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_bundle(&configs, &[&ng]).await;
    wait_admitting(&env, &[&ng]).await;
    let (tainted, unchanged) = (
        admissions_now(&ng, "tainted").await,
        admissions_now(&ng, "unchanged").await,
    );
    for i in 0..5 {
        let made = env
            .nodes
            .create(&PostParams::default(), &untainted(&format!("both-{i}")))
            .await
            .unwrap_or_else(|e| panic!("create both-{i}: {e}"));
        let keys = taint_keys(&made);
        assert_eq!(
            keys.iter().filter(|k| *k == TAINT).count(),
            1,
            "exactly one startup taint with both mechanisms: {keys:?}"
        );
    }
    // Which one put it on (the API server's order of mutators), for the log.
    eprintln!(
        "with both: the webhook tainted {} and found {} already tainted",
        admissions_now(&ng, "tainted").await - tainted,
        admissions_now(&ng, "unchanged").await - unchanged
    );
}

/// A replica told to stop keeps answering the webhook for a while: the
/// Service of a Pod being deleted still routes the API server's calls to it
/// until its endpoints move, and under `failurePolicy: Ignore` a refused
/// call admits the node untainted. Here, under `Fail`, a node created after
/// the replica began shutting down comes back from CREATE tainted, and the
/// replica still exits by itself, cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_told_to_stop_still_answers_the_webhook_while_it_drains() {
    let (env, mut ng, _, _) = one_webhook("webhook-drain").await;
    ng.signal_term();
    wait_for(
        "nodegate to begin shutting down",
        Duration::from_secs(10),
        || {
            let logs = ng.logs();
            async move {
                match logs.contains("shutting down") {
                    true => Ok(()),
                    false => Err("no `shutting down` in the log yet".to_string()),
                }
            }
        },
    )
    .await;
    let created = env
        .nodes
        .create(&PostParams::default(), &untainted("after-sigterm"))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "a create after SIGTERM was not admitted: {e}\n{}",
                ng.logs()
            )
        });
    assert!(
        has_gate_taint(&created),
        "a node created while the replica drains comes back without the startup taint: {:?}\n{}",
        taint_keys(&created),
        ng.logs()
    );
    let status = ng.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "the replica did not exit cleanly by itself within 30 s after SIGTERM ({status:?})\n{}",
        ng.logs()
    );
}
