//! What deploy/ ships, proven on the real API server (deploy/local): the
//! kustomize base and the rendered Helm chart pass server-side dry-run (and
//! Pod Security "restricted"), the chart renders the same objects as the
//! base, and nodegate runs a whole gate scenario — readiness, a deadline,
//! leader election with a failover — with nothing but a token of the
//! ServiceAccount that deploy/ creates, bound by deploy/'s RBAC. The same
//! token is checked to be refused what nodegate must never do, to reach the
//! admission webhook's one Secret and one webhook configuration and no
//! other, and to be held by the admission policy to adding or removing its
//! own taint and nodegate.dev/ annotations. The cert-manager variant is
//! compared both ways and dry-run without its CRD kinds.

mod support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, PostParams};
use nodegate::cluster::entrance::{add_taint, node_facts};
use nodegate_core::model::Taint;
use serde_json::{Value, json};
use support::{Nodegate, TestCluster, fake_node, repo_root, wait_for};

const NS: &str = "nodegate-system";
const SA: &str = "nodegate";
const TAINT: &str = "nodegate.dev/initializing";

// ---------------------------------------------------------------------------
// Tools: the cluster's own kubectl and the cached Helm build
// ---------------------------------------------------------------------------

/// The directory `deploy/local/build` prints for `flag`; panics with its
/// message when it cannot provide one.
fn build_dir(flag: &str) -> PathBuf {
    let out = Command::new(support::local_script("build"))
        .arg(flag)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run deploy/local/build {flag}: {e}"));
    assert!(
        out.status.success(),
        "deploy/local/build {flag} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn kubectl_bin() -> PathBuf {
    build_dir("--print-dir").join("kubectl")
}

/// Helm from the version-keyed cache (built on first use), or, with
/// NODEGATE_LOCAL_BIN, from there or PATH; the test fails without one.
fn helm_bin() -> PathBuf {
    build_dir("--helm").join("helm")
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(input.as_bytes())
            .unwrap_or_else(|e| panic!("writing to {}: {e}", program.display()));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for {}: {e}", program.display()));
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn must(what: &str, o: Output) -> Output {
    assert!(o.ok, "{what} failed:\n{}\n{}", o.stdout, o.stderr);
    o
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut all = vec!["--kubeconfig", kubeconfig.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    run(&kubectl_bin(), &all, stdin)
}

fn kustomize(dir: &str) -> String {
    must(
        &format!("kubectl kustomize {dir}"),
        run(&kubectl_bin(), &["kustomize", dir], None),
    )
    .stdout
}

fn helm_template(extra: &[&str]) -> String {
    let mut args = vec![
        "template",
        "nodegate",
        "deploy/helm/nodegate",
        "--namespace",
        NS,
    ];
    args.extend_from_slice(extra);
    must("helm template", run(&helm_bin(), &args, None)).stdout
}

/// The objects of a multi-document YAML stream (empty documents skipped).
fn objects(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| {
            serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{yaml}"))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn to_stream(objs: &[&Value]) -> String {
    objs.iter()
        .map(|o| serde_yaml::to_string(o).expect("a JSON value is valid YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn kind_name(o: &Value) -> (String, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn find<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in the rendered objects"))
}

/// Applies `objs` with server-side dry-run and checks every one was accepted
/// and that Pod Security had nothing to say about any of them.
fn dry_run(cluster: &TestCluster, what: &str, objs: &[&Value]) {
    let out = must(
        &format!("{what}: kubectl apply --dry-run=server"),
        kubectl(
            &cluster.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&to_stream(objs)),
        ),
    );
    let accepted = out
        .stdout
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(
        accepted,
        objs.len(),
        "{what}: every object must be accepted:\n{}",
        out.stdout
    );
    assert!(
        !out.stderr.contains("PodSecurity"),
        "{what}: the pods must pass Pod Security \"restricted\":\n{}",
        out.stderr
    );
    eprintln!("{what}: {accepted} objects pass server-side dry-run");
}

// ---------------------------------------------------------------------------
// 1. Server-side dry-run of everything deploy/ ships
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_base_and_helm_chart_pass_server_side_dry_run() {
    let cluster = TestCluster::start("deploy-dry-run").await;
    let base = objects(&kustomize("deploy/kustomize/base"));

    // A namespaced object cannot be dry-run into a namespace that only
    // exists in the same dry-run, so the Namespace goes in for real first;
    // with its Pod Security labels in place, the dry-run of the Deployment
    // also reports any "restricted" violation.
    let ns: Vec<&Value> = base.iter().filter(|o| o["kind"] == "Namespace").collect();
    assert_eq!(ns.len(), 1, "the base has exactly one Namespace");
    assert_eq!(
        ns[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted",
        "the namespace must enforce Pod Security restricted"
    );
    must(
        "create the namespace",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            Some(&to_stream(&ns)),
        ),
    );
    dry_run(&cluster, "kustomize base", &base.iter().collect::<Vec<_>>());

    let chart = objects(&helm_template(&[]));
    dry_run(&cluster, "helm chart", &chart.iter().collect::<Vec<_>>());

    // The chart's optional paths: the config file (criticalPods), dry-run,
    // json logs, an IPv6 bind address, extra tolerations.
    let custom = objects(&helm_template(&[
        "--set-json",
        r#"config.criticalPods=[{"name":"kube-proxy","namespace":"kube-system","selector":{"matchLabels":{"k8s-app":"kube-proxy"}}}]"#,
        "--set",
        "config.dryRun=true,config.logFormat=json,http.bindAddress=::,http.port=9090",
        "--set-json",
        r#"tolerations=[{"key":"example.com/pool","operator":"Exists"}]"#,
    ]));
    assert!(
        custom.iter().any(|o| o["kind"] == "ConfigMap"),
        "criticalPods must render the config file"
    );
    dry_run(
        &cluster,
        "helm chart (custom values)",
        &custom.iter().collect::<Vec<_>>(),
    );

    // The webhook's other settings: strict failurePolicy, an object
    // selector, the node selector and more certificate names.
    let strict = objects(&helm_template(&[
        "--set",
        "webhook.failurePolicy=Fail,webhook.timeoutSeconds=5,webhook.extraHosts[0]=10.0.0.1",
        "--set",
        "config.managedNodeSelector=example.com/pool in (web),config.taintNewNodes=false",
        "--set-json",
        r#"webhook.objectSelector={"matchExpressions":[{"key":"example.com/pool","operator":"In","values":["web"]}]}"#,
    ]));
    assert_eq!(
        find(&strict, "MutatingWebhookConfiguration")["webhooks"][0]["failurePolicy"],
        "Fail"
    );
    dry_run(
        &cluster,
        "helm chart (strict webhook)",
        &strict.iter().collect::<Vec<_>>(),
    );

    // The cert-manager variant, both ways. This cluster has no cert-manager
    // CRDs, so its Certificate and Issuer cannot be dry-run (the API server
    // has no such kinds); every other object of the variant is.
    for (what, objs) in [
        (
            "kustomize cert-manager overlay",
            objects(&kustomize("deploy/kustomize/overlays/cert-manager")),
        ),
        (
            "helm chart (webhook.certManager.enabled)",
            objects(&helm_template(&[
                "--set",
                "webhook.certManager.enabled=true",
            ])),
        ),
    ] {
        let (cert_manager, rest): (Vec<&Value>, Vec<&Value>) = objs
            .iter()
            .filter(|o| o["kind"] != "Namespace")
            .partition(|o| {
                o["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("cert-manager.io/"))
            });
        let mut kinds: Vec<String> = cert_manager.iter().map(|o| kind_name(o).0).collect();
        kinds.sort();
        assert_eq!(
            kinds,
            ["Certificate", "Issuer"],
            "{what}: cert-manager objects"
        );
        dry_run(
            &cluster,
            &format!("{what}, without Certificate and Issuer"),
            &rest,
        );
    }
}

// ---------------------------------------------------------------------------
// 2. The chart and the base describe the same deployment
// ---------------------------------------------------------------------------

/// Needs no cluster: both renderings are compared object by object.
#[test]
fn helm_chart_renders_the_same_objects_as_the_kustomize_base() {
    let base = objects(&kustomize("deploy/kustomize/base"));
    let chart = objects(&helm_template(&[]));

    let names = |objs: &[Value]| -> Vec<(String, String)> {
        let mut v: Vec<_> = objs
            .iter()
            .map(kind_name)
            // Helm leaves the namespace to `helm install --create-namespace`.
            .filter(|(k, _)| k != "Namespace")
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&base), names(&chart), "same kinds and names");

    // Same names (checked above), so each object pairs with its namesake.
    let named = |objs: &[Value], kind: &str, name: &str| -> Value {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    for o in &base {
        let (kind, name) = kind_name(o);
        let fields: &[&str] = match kind.as_str() {
            "ClusterRole" | "Role" => &["rules"],
            "ClusterRoleBinding" | "RoleBinding" => &["roleRef", "subjects"],
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => &["spec"],
            "MutatingWebhookConfiguration" => &["webhooks"],
            "Secret" => &["type", "data"],
            "Service" | "PodDisruptionBudget" => &["spec"],
            _ => continue,
        };
        let mut c = named(&chart, &kind, &name);
        // The chart spells out the Service type; kustomize leaves the API
        // default.
        if kind == "Service"
            && c["spec"]["type"] == "ClusterIP"
            && let Some(spec) = c["spec"].as_object_mut()
        {
            spec.remove("type");
        }
        for field in fields {
            assert_eq!(
                o[*field], c[*field],
                "{kind} {name} {field} differs between deploy/kustomize and deploy/helm"
            );
        }
        if kind.ends_with("Role") || kind.ends_with("RoleBinding") {
            assert_eq!(
                o["metadata"]["namespace"], c["metadata"]["namespace"],
                "{kind} {name} namespace"
            );
        }
    }

    let base_dep = find(&base, "Deployment");
    let chart_dep = find(&chart, "Deployment");
    assert_eq!(base_dep["spec"]["replicas"], chart_dep["spec"]["replicas"]);
    assert_eq!(base_dep["spec"]["strategy"], chart_dep["spec"]["strategy"]);
    let pod = |d: &Value| d["spec"]["template"]["spec"].clone();
    let (bp, cp) = (pod(base_dep), pod(chart_dep));
    for field in [
        "serviceAccountName",
        "priorityClassName",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "securityContext",
        "automountServiceAccountToken",
        "enableServiceLinks",
    ] {
        assert_eq!(bp[field], cp[field], "pod spec {field}");
    }
    let (bc, cc) = (&bp["containers"][0], &cp["containers"][0]);
    for field in [
        "image",
        "ports",
        "env",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
    ] {
        assert_eq!(bc[field], cc[field], "container {field}");
    }
    // The base passes no --taint, so nodegate manages its default taint:
    // the pods must tolerate that one (or a fully gated cluster could never
    // start them).
    assert!(
        !bc["args"]
            .as_array()
            .expect("base args")
            .iter()
            .filter_map(Value::as_str)
            .any(|a| a == "--taint" || a.starts_with("--taint=")),
        "the base now passes --taint: check its tolerations match"
    );
    assert!(
        bp["tolerations"].as_array().is_some_and(|ts| ts
            .iter()
            .any(|t| t["key"] == TAINT && t["operator"] == "Exists")),
        "the base's pods must tolerate {TAINT}: {}",
        bp["tolerations"]
    );
    // Two replicas in two zones, required.
    let spread = &bp["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["whenUnsatisfiable"], "DoNotSchedule");
    // The base passes only what differs from the binary's defaults; the
    // chart passes every flag. Each flag the base sets, the chart sets alike.
    let chart_args: Vec<&str> = cc["args"]
        .as_array()
        .expect("chart args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for a in bc["args"].as_array().expect("base args") {
        let a = a.as_str().expect("string arg");
        assert!(
            chart_args.contains(&a),
            "the base passes {a:?}, the chart does not: {chart_args:?}"
        );
    }

    // The webhook: the container listens where the Service sends it, and
    // the base's shipped choices are the ones the docs promise.
    let hook = &find(&base, "MutatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(hook["name"], "nodes.nodegate.dev");
    assert_eq!(
        hook["failurePolicy"], "Ignore",
        "the default never blocks registration"
    );
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["rules"][0]["operations"], json!(["CREATE"]));
    assert_eq!(hook["rules"][0]["resources"], json!(["nodes"]));
    assert_eq!(hook["clientConfig"]["service"]["name"], "nodegate-webhook");
    assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate-node");
    assert!(
        hook["timeoutSeconds"].as_i64().is_some_and(|t| t <= 5),
        "every node registration waits for the webhook: {}",
        hook["timeoutSeconds"]
    );
    assert!(
        bc["ports"].as_array().is_some_and(|ps| ps
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 9443)),
        "the container must declare the webhook port: {}",
        bc["ports"]
    );
    let base_args: Vec<&str> = bc["args"]
        .as_array()
        .expect("base args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for a in [
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-cert-secret=nodegate-system/nodegate-webhook-tls",
        "--webhook-configuration=nodegate",
        "--webhook-host=nodegate-webhook.nodegate-system.svc",
        "--taint-new-nodes",
    ] {
        assert!(
            base_args.contains(&a),
            "the base must pass {a}: {base_args:?}"
        );
    }
    let secret = named(&base, "Secret", "nodegate-webhook-tls");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(
        secret["data"],
        json!({"tls.crt": "", "tls.key": ""}),
        "the Secret ships empty: nodegate fills it"
    );
    // A failurePolicy other than Ignore or Fail is refused by the chart.
    let bad = run(
        &helm_bin(),
        &[
            "template",
            "nodegate",
            "deploy/helm/nodegate",
            "--namespace",
            NS,
            "--set",
            "webhook.failurePolicy=Never",
        ],
        None,
    );
    assert!(
        !bad.ok
            && bad
                .stderr
                .contains("webhook.failurePolicy must be Ignore or Fail"),
        "the chart must refuse webhook.failurePolicy=Never:\n{}{}",
        bad.stdout,
        bad.stderr
    );

    cert_manager_variant_is_the_same_both_ways();

    // The optional ServiceMonitor, both ways.
    let with_sm = objects(&kustomize("deploy/kustomize/overlays/servicemonitor"));
    let chart_sm = objects(&helm_template(&["--set", "serviceMonitor.enabled=true"]));
    assert_eq!(
        find(&with_sm, "ServiceMonitor")["spec"],
        find(&chart_sm, "ServiceMonitor")["spec"],
        "ServiceMonitor spec"
    );
}

/// The kustomize cert-manager overlay and the chart with
/// webhook.certManager.enabled: the same objects, the certificate from a
/// mounted Secret, and no access to Secrets or webhook configurations.
fn cert_manager_variant_is_the_same_both_ways() {
    let kz = objects(&kustomize("deploy/kustomize/overlays/cert-manager"));
    let chart = objects(&helm_template(&[
        "--set",
        "webhook.certManager.enabled=true",
    ]));
    let names = |objs: &[Value]| -> Vec<(String, String)> {
        let mut v: Vec<_> = objs
            .iter()
            .map(kind_name)
            .filter(|(k, _)| k != "Namespace")
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&kz),
        names(&chart),
        "cert-manager variant: same kinds and names"
    );
    for (kind, name) in names(&kz) {
        assert!(
            !(kind == "Secret" || name.ends_with("-webhook-certs")),
            "the cert-manager variant must not ship {kind} {name}"
        );
    }
    for kind in ["Certificate", "Issuer"] {
        assert_eq!(
            find(&kz, kind)["spec"],
            find(&chart, kind)["spec"],
            "{kind} spec"
        );
    }
    let cert = find(&kz, "Certificate");
    assert_eq!(cert["spec"]["secretName"], "nodegate-webhook-tls");
    assert_eq!(
        cert["spec"]["dnsNames"][0], "nodegate-webhook.nodegate-system.svc",
        "the certificate covers the name the API server calls"
    );
    let (kh, ch) = (
        find(&kz, "MutatingWebhookConfiguration"),
        find(&chart, "MutatingWebhookConfiguration"),
    );
    assert_eq!(
        kh["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "nodegate-system/nodegate-webhook",
        "the cainjector fills the caBundle from the Certificate"
    );
    assert_eq!(
        kh["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        ch["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    );
    assert_eq!(kh["webhooks"], ch["webhooks"], "webhooks");
    let pod = |objs: &[Value]| find(objs, "Deployment")["spec"]["template"]["spec"].clone();
    let (kp, cp) = (pod(&kz), pod(&chart));
    assert_eq!(kp["volumes"], cp["volumes"], "volumes");
    assert_eq!(
        kp["containers"][0]["volumeMounts"], cp["containers"][0]["volumeMounts"],
        "volumeMounts"
    );
    let (ka, ca) = (container_args(&kz), container_args(&chart));
    for a in &ka {
        assert!(
            ca.contains(a),
            "the overlay passes {a:?}, the chart does not: {ca:?}"
        );
    }
    let mount = kp["containers"][0]["volumeMounts"][0]["mountPath"]
        .as_str()
        .expect("the certificate's mount path");
    assert!(
        ka.contains(&format!("--webhook-cert-dir={mount}")),
        "--webhook-cert-dir must name the mounted Secret ({mount}): {ka:?}"
    );
    for a in ka.iter().chain(&ca) {
        assert!(
            !a.starts_with("--webhook-cert-secret")
                && !a.starts_with("--webhook-configuration")
                && !a.starts_with("--webhook-host"),
            "the cert-manager variant must not run the self-managed certificate: {a}"
        );
    }
}

/// The container args of the Deployment in `objs`.
fn container_args(objs: &[Value]) -> Vec<String> {
    find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

/// Runs the real binary with `args` and a kubeconfig that cannot exist:
/// settings are validated first (exit 2 on any bad flag or value), so
/// reaching "cannot find cluster credentials" (exit 1) means nodegate took
/// every argument.
fn assert_accepted(what: &str, args: &[String]) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run nodegate: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && stderr.contains("cluster credentials"),
        "{what}: nodegate must accept {args:?}, got {:?}:\n{stderr}",
        out.status.code()
    );
}

/// Needs no cluster: the arguments deploy/ passes are ones nodegate takes,
/// and the config file the chart writes for criticalPods parses.
#[test]
fn deployed_arguments_are_accepted_by_nodegate() {
    assert_accepted(
        "kustomize base",
        &container_args(&objects(&kustomize("deploy/kustomize/base"))),
    );
    assert_accepted("helm chart", &container_args(&objects(&helm_template(&[]))));
    assert_accepted(
        "kustomize cert-manager overlay",
        &container_args(&objects(&kustomize(
            "deploy/kustomize/overlays/cert-manager",
        ))),
    );
    assert_accepted(
        "helm chart (webhook.certManager.enabled)",
        &container_args(&objects(&helm_template(&[
            "--set",
            "webhook.certManager.enabled=true",
        ]))),
    );
    assert_accepted(
        "helm chart (webhook values)",
        &container_args(&objects(&helm_template(&[
            "--set",
            "webhook.port=10443,webhook.certValidity=720h,webhook.extraHosts[0]=10.0.0.1",
            "--set",
            "config.managedNodeSelector=example.com/pool in (web),config.newNodeWindow=90s",
            "--set",
            "http.bindAddress=::",
        ]))),
    );
    assert_accepted(
        "helm chart (no webhook, no net)",
        &container_args(&objects(&helm_template(&[
            "--set",
            "webhook.enabled=false,config.taintNewNodes=false",
        ]))),
    );

    let custom = objects(&helm_template(&[
        "--set-json",
        r#"config.criticalPods=[{"name":"kube-proxy","namespace":"kube-system","selector":{"matchLabels":{"k8s-app":"kube-proxy"}}}]"#,
        "--set-json",
        r#"config.exclude=["kube-system/debug"]"#,
        "--set",
        "config.dryRun=true,config.excludeSelector=team in (obs),config.transientTaints[0]=example.com/boot*",
        "--set",
        "config.onTimeout=keep,config.logFormat=json,http.bindAddress=::,leaderElection.leaseNamespace=elsewhere",
    ]));
    let file = find(&custom, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml in the ConfigMap")
        .to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, file).expect("write config");
    let args: Vec<String> = container_args(&custom)
        .into_iter()
        .map(|a| {
            if a.starts_with("--config=") {
                format!("--config={}", path.display())
            } else {
                a
            }
        })
        .collect();
    assert!(
        args.iter().any(|a| a.starts_with("--config=")),
        "criticalPods must pass --config: {args:?}"
    );
    assert_accepted("helm chart (custom values)", &args);
}

// ---------------------------------------------------------------------------
// 3. nodegate with nothing but deploy/'s RBAC
// ---------------------------------------------------------------------------

/// A kubeconfig that carries only `token` and the cluster's CA: no client
/// certificate, no admin token, nothing else to fall back on.
fn token_kubeconfig(admin: &Path, token: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(admin)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", admin.display()));
    let kc: Value = serde_yaml::from_str(&text).expect("admin kubeconfig parses");
    let cluster = &kc["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().expect("server URL");
    let ca = cluster["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data");
    let sa_kc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "nodegate", "user": {"token": token}}],
        "contexts": [{"name": "nodegate", "context": {"cluster": "local", "user": "nodegate", "namespace": NS}}],
        "current-context": "nodegate",
    });
    let path = dir.join("nodegate-sa.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&sa_kc).expect("yaml"))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// `kubectl auth can-i` as the ServiceAccount itself (a
/// SelfSubjectAccessReview with its token): true for "yes".
fn can_i(sa_kubeconfig: &Path, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let out = kubectl(sa_kubeconfig, &all, None);
    match out.stdout.trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i {args:?}: unexpected answer {other:?}\n{}",
            out.stderr
        ),
    }
}

fn daemonset(name: &str, hold: bool, ready_after: Option<&str>, pool: Option<&str>) -> DaemonSet {
    let mut labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    if hold {
        labels.insert("nodegate.test/hold-not-ready".into(), "true".into());
    }
    let annotations: BTreeMap<String, String> = ready_after
        .map(|d| ("nodegate.test/ready-after".to_string(), d.to_string()))
        .into_iter()
        .collect();
    let node_selector: BTreeMap<String, String> = pool
        .map(|p| ("example.com/pool".to_string(), p.to_string()))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "infra"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": [{"key": TAINT, "operator": "Exists"}],
                    "nodeSelector": node_selector,
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

fn annotation(n: &Node, key: &str) -> Option<String> {
    n.metadata.annotations.as_ref()?.get(key).cloned()
}

fn gated(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT))
}

async fn wait_opened(
    nodes: &Api<Node>,
    name: &str,
    within: Duration,
    logs: &dyn Fn() -> String,
) -> String {
    let what = format!("{name} to open");
    let seen = wait_for(&what, within, || async {
        match nodes.get(name).await {
            Ok(n) if !gated(&n) => Ok(annotation(&n, "nodegate.dev/opened-by")),
            Ok(n) => Err(format!(
                "still tainted: {:?}",
                n.spec.and_then(|s| s.taints)
            )),
            Err(e) => Err(e.to_string()),
        }
    });
    // A panic inside wait_for would lose nodegate's side of the story.
    match tokio::time::timeout(within + Duration::from_secs(5), seen).await {
        Ok(by) => {
            by.unwrap_or_else(|| panic!("{name} opened without nodegate.dev/opened-by\n{}", logs()))
        }
        Err(_) => panic!("{name} did not open within {within:?}\n{}", logs()),
    }
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("nodegate")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serviceaccount_with_deploy_rbac_runs_the_gate_and_nothing_more() {
    let cluster = TestCluster::start("deploy-rbac").await;
    let admin = cluster.kubeconfig.clone();

    // --- deploy/'s identity and permissions, for real; the Deployment is
    // not created (kwok runs no real containers): nodegate runs out of
    // cluster below, as that ServiceAccount.
    let base = objects(&kustomize("deploy/kustomize/base"));
    let identity: Vec<&Value> = base
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "Namespace"
                        | "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Role"
                        | "RoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                        | "Secret"
                        | "MutatingWebhookConfiguration"
                )
            )
        })
        .collect();
    assert_eq!(
        identity.len(),
        16,
        "namespace, account, five roles, five bindings, the admission policy and its binding, \
         the webhook's empty Secret and its configuration"
    );
    // The webhook configuration is applied for real, and no nodegate-webhook
    // Service exists: every node below is created while the API server
    // cannot reach the webhook, and failurePolicy Ignore lets it register.
    must(
        "apply deploy/'s ServiceAccount and RBAC",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&identity))),
    );
    // TokenRequest, as the kubelet does for a pod's projected token.
    let token = must(
        "kubectl create token",
        kubectl(
            &admin,
            &["-n", NS, "create", "token", SA, "--duration=1h"],
            None,
        ),
    )
    .stdout
    .trim()
    .to_string();
    assert!(!token.is_empty(), "TokenRequest returned no token");
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &token, dir.path());

    let whoami = must(
        "kubectl auth whoami",
        kubectl(
            &sa,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        ),
    );
    assert_eq!(
        whoami.stdout.trim(),
        format!("system:serviceaccount:{NS}:{SA}")
    );

    // --- what it may and may not do, asked of the API server with its token.
    let allowed: &[&[&str]] = &[
        &["get", "nodes"],
        &["list", "nodes"],
        &["watch", "nodes"],
        &["patch", "nodes"],
        &["list", "daemonsets.apps", "-A"],
        &["watch", "daemonsets.apps", "-A"],
        &["list", "pods", "-A"],
        &["watch", "pods", "-A"],
        &["create", "events.events.k8s.io", "-n", "default"],
        &["create", "leases.coordination.k8s.io", "-n", NS],
        &["get", "leases.coordination.k8s.io/nodegate", "-n", NS],
        &["update", "leases.coordination.k8s.io/nodegate", "-n", NS],
        // The self-managed webhook certificate: its one Secret, and the
        // caBundle of its one webhook configuration.
        &["get", "secrets/nodegate-webhook-tls", "-n", NS],
        &["update", "secrets/nodegate-webhook-tls", "-n", NS],
        &["patch", "secrets/nodegate-webhook-tls", "-n", NS],
        &["list", "secrets/nodegate-webhook-tls", "-n", NS],
        &["watch", "secrets/nodegate-webhook-tls", "-n", NS],
        &[
            "get",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "update",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "patch",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
    ];
    let forbidden: &[&[&str]] = &[
        &["get", "secrets", "-A"],
        &["list", "secrets", "-n", NS],
        &["watch", "secrets", "-n", NS],
        // No Secret but the webhook's own, and that one only in its place.
        &["get", "secrets/other-tls", "-n", NS],
        &["update", "secrets/other-tls", "-n", NS],
        &["patch", "secrets/other-tls", "-n", NS],
        &["create", "secrets", "-n", NS],
        &["delete", "secrets/nodegate-webhook-tls", "-n", NS],
        &["get", "secrets/nodegate-webhook-tls", "-n", "kube-system"],
        &["update", "secrets/nodegate-webhook-tls", "-n", "default"],
        // No webhook configuration but its own, and no other kind of it.
        &[
            "get",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other-webhooks",
        ],
        &[
            "update",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other-webhooks",
        ],
        &[
            "patch",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other-webhooks",
        ],
        &[
            "list",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        ],
        &[
            "create",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        ],
        &[
            "delete",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "update",
            "validatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "update",
            "validatingadmissionpolicies.admissionregistration.k8s.io/nodegate-node-changes",
        ],
        &["get", "configmaps", "-n", "kube-system"],
        &["patch", "pods", "-A"],
        &["delete", "pods", "-A"],
        &["create", "pods", "-n", NS],
        &["get", "pods", "-A"],
        &["delete", "nodes"],
        &["update", "nodes"],
        &["create", "nodes"],
        &["patch", "nodes", "--subresource=status"],
        &["patch", "daemonsets.apps", "-A"],
        &["get", "daemonsets.apps", "-A"],
        &["create", "events", "-n", "default"],
        // Events only where nodegate writes them.
        &["create", "events.events.k8s.io", "-n", NS],
        &["create", "events.events.k8s.io", "-n", "kube-system"],
        &["patch", "events.events.k8s.io", "-n", "default"],
        &["delete", "events.events.k8s.io", "-n", "default"],
        &[
            "update",
            "leases.coordination.k8s.io/kube-controller-manager",
            "-n",
            NS,
        ],
        &[
            "update",
            "leases.coordination.k8s.io/nodegate",
            "-n",
            "kube-system",
        ],
        &["create", "leases.coordination.k8s.io", "-n", "kube-system"],
        &["delete", "leases.coordination.k8s.io/nodegate", "-n", NS],
        &["create", "serviceaccounts/token", "-n", NS],
        &["impersonate", "users"],
        &["escalate", "clusterroles.rbac.authorization.k8s.io"],
        &["bind", "clusterroles.rbac.authorization.k8s.io"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
    ];
    let wrong: Vec<String> = allowed
        .iter()
        .filter(|a| !can_i(&sa, a))
        .map(|a| format!("refused but needed: {}", a.join(" ")))
        .chain(
            forbidden
                .iter()
                .filter(|a| can_i(&sa, a))
                .map(|a| format!("allowed but must not be: {}", a.join(" "))),
        )
        .collect();
    assert!(
        wrong.is_empty(),
        "RBAC of deploy/kustomize/base:\n{}",
        wrong.join("\n")
    );
    // And one real request, not just a review: the API server says 403.
    let secrets = kubectl(&sa, &["get", "secrets", "-A"], None);
    assert!(
        !secrets.ok && secrets.stderr.contains("Forbidden"),
        "reading secrets must be Forbidden: {}{}",
        secrets.stdout,
        secrets.stderr
    );

    webhook_certificate_writes_reach_only_its_own_objects(&admin, &sa);

    // --- the admission policy: with the token, a Node changes only by its
    // nodegate.dev/ taints and annotations.
    admission_policy_limits_node_changes(&cluster, &sa).await;

    // --- a gate scenario, run by two replicas holding only that token.
    cluster.namespace("infra").await;
    let ds: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), "infra");
    for d in [
        daemonset("cni", false, None, None),
        daemonset("logs", false, Some("1s"), None),
        // Broken on the "gpu" pool only: its pods there never turn Ready.
        daemonset("gpu-agent", true, None, Some("gpu")),
    ] {
        ds.create(&PostParams::default(), &d)
            .await
            .expect("create daemonset");
    }
    // The replicas run with the base's own arguments (the webhook with its
    // self-managed certificate, the late-taint net), the webhook on a free
    // loopback port instead of 0.0.0.0:9443, plus short lease timings: any
    // write the webhook's certificate or the net needs and deploy/'s RBAC
    // lacks shows up as a refusal in their logs (checked at the end).
    let deployed: Vec<String> = container_args(&base)
        .into_iter()
        .filter(|a| a != "run" && a != "--leader-elect")
        .map(|a| {
            if a.starts_with("--webhook-addr=") {
                "--webhook-addr=127.0.0.1:0".to_string()
            } else {
                a
            }
        })
        .collect();
    assert!(
        deployed
            .iter()
            .any(|a| a.starts_with("--webhook-cert-secret=")),
        "the base runs the self-managed webhook certificate: {deployed:?}"
    );
    let election = [
        "--leader-elect",
        "--lease-namespace",
        NS,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "1s",
        "--timeout",
        "8s",
        "--http-addr",
        "127.0.0.1:0",
    ];
    let mut replicas: Vec<(String, Nodegate)> = ["nodegate-a", "nodegate-b"]
        .into_iter()
        .map(|name| {
            let args: Vec<&str> = deployed
                .iter()
                .map(String::as_str)
                .chain(election)
                .collect();
            let ng = Nodegate::start_as(&sa, &[("POD_NAME", name), ("POD_NAMESPACE", NS)], &args);
            (name.to_string(), ng)
        })
        .collect();
    let logs = |rs: &[(String, Nodegate)]| -> String {
        rs.iter()
            .map(|(n, ng)| format!("---- {n} ----\n{}", ng.logs()))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NS);
    let first_leader = wait_for("a leader", Duration::from_secs(30), || async {
        lease_holder(&leases)
            .await
            .ok_or_else(|| "no holder yet".to_string())
    })
    .await;
    eprintln!("leader: {first_leader}");

    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let taint = [(TAINT, "", "NoSchedule")];
    cluster.create_node(&fake_node("web-0", &[], &taint)).await;
    cluster
        .create_node(&fake_node("gpu-0", &[("example.com/pool", "gpu")], &taint))
        .await;

    let l = || logs(&replicas);
    assert_eq!(
        wait_opened(&nodes, "web-0", Duration::from_secs(30), &l).await,
        "ready"
    );
    assert_eq!(
        wait_opened(&nodes, "gpu-0", Duration::from_secs(30), &l).await,
        "timeout"
    );

    // The Events were recorded, with the ServiceAccount's own permission.
    let events: Api<KubeEvent> = Api::namespaced(cluster.client.clone(), "default");
    wait_for(
        "GateOpened and GateTimedOut events",
        Duration::from_secs(15),
        || async {
            let evs = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let reasons: Vec<(String, String)> = evs
                .items
                .iter()
                .map(|e| {
                    (
                        e.regarding
                            .as_ref()
                            .and_then(|r| r.name.clone())
                            .unwrap_or_default(),
                        e.reason.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let has = |n: &str, r: &str| reasons.iter().any(|(a, b)| a == n && b == r);
            if has("web-0", "GateOpened") && has("gpu-0", "GateTimedOut") {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        },
    )
    .await;

    // --- failover: the leader dies without releasing the lease; the
    // follower takes over after the lease duration and gates the next node.
    let leader_at = replicas
        .iter()
        .position(|(name, _)| first_leader.starts_with(name.as_str()))
        .unwrap_or_else(|| panic!("lease holder {first_leader} is neither replica"));
    let (dead_name, mut dead) = replicas.remove(leader_at);
    dead.kill();
    eprintln!("killed the leader {dead_name}");
    cluster.create_node(&fake_node("web-1", &[], &taint)).await;
    let l = || logs(&replicas);
    assert_eq!(
        wait_opened(&nodes, "web-1", Duration::from_secs(30), &l).await,
        "ready"
    );
    let second_leader = lease_holder(&leases).await.unwrap_or_default();
    assert!(
        second_leader.starts_with(replicas[0].0.as_str()),
        "the surviving replica {} must hold the lease, holder is {second_leader:?}",
        replicas[0].0
    );

    // No request of either replica was refused: deploy/'s RBAC is enough.
    let all = format!(
        "---- {dead_name} ----\n{}\n{}",
        dead.logs(),
        logs(&replicas)
    );
    for refusal in ["forbidden", "Forbidden", "cannot watch the lease"] {
        assert!(
            !all.contains(refusal),
            "nodegate hit a permission it lacks ({refusal:?}):\n{all}"
        );
    }
}

/// Real requests with the ServiceAccount's token (not only access reviews):
/// it reads and writes the webhook's Secret and sets the caBundle of its
/// webhook configuration; the same requests on a neighbouring Secret or
/// webhook configuration, and creating a Secret, are Forbidden.
fn webhook_certificate_writes_reach_only_its_own_objects(admin: &Path, sa: &Path) {
    // The neighbours, created by the admin; the ServiceAccount's requests on
    // them must fail on RBAC, not on absence.
    must(
        "create the neighbouring Secret and webhook configuration",
        kubectl(
            admin,
            &["apply", "-f", "-"],
            Some(&to_stream(&[
                &json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "other-tls", "namespace": NS},
                    "type": "Opaque", "data": {"key": "c2VjcmV0"},
                }),
                &json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "other-webhooks"},
                    "webhooks": [],
                }),
            ])),
        ),
    );
    // A real PEM bundle: the cluster's own CA, as nodegate would write its.
    let text = std::fs::read_to_string(admin).expect("admin kubeconfig");
    let kc: Value = serde_yaml::from_str(&text).expect("admin kubeconfig parses");
    let ca_bundle = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data")
        .to_string();
    let set_ca =
        json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca_bundle}]);
    let mark = json!({"metadata": {"annotations": {"nodegate.test/written-by": "nodegate"}}});

    let ok =
        |what: &str, o: Output| assert!(o.ok, "{what} must be allowed:\n{}{}", o.stdout, o.stderr);
    let forbidden = |what: &str, o: Output| {
        assert!(
            !o.ok && o.stderr.to_lowercase().contains("forbidden"),
            "{what} must be Forbidden:\n{}{}",
            o.stdout,
            o.stderr
        )
    };
    ok(
        "reading the webhook's Secret",
        kubectl(
            sa,
            &["-n", NS, "get", "secret", "nodegate-webhook-tls"],
            None,
        ),
    );
    ok(
        "writing the webhook's Secret",
        kubectl(
            sa,
            &[
                "-n",
                NS,
                "patch",
                "secret",
                "nodegate-webhook-tls",
                "--type",
                "merge",
                "-p",
                &mark.to_string(),
            ],
            None,
        ),
    );
    ok(
        "setting the caBundle of the nodegate webhook configuration",
        kubectl(
            sa,
            &[
                "patch",
                "mutatingwebhookconfiguration",
                "nodegate",
                "--type",
                "json",
                "-p",
                &set_ca.to_string(),
            ],
            None,
        ),
    );
    forbidden(
        "reading another Secret",
        kubectl(sa, &["-n", NS, "get", "secret", "other-tls"], None),
    );
    forbidden(
        "writing another Secret",
        kubectl(
            sa,
            &[
                "-n",
                NS,
                "patch",
                "secret",
                "other-tls",
                "--type",
                "merge",
                "-p",
                &mark.to_string(),
            ],
            None,
        ),
    );
    forbidden(
        "creating a Secret",
        kubectl(
            sa,
            &[
                "-n",
                NS,
                "create",
                "secret",
                "generic",
                "nodegate-extra",
                "--from-literal=k=v",
            ],
            None,
        ),
    );
    forbidden(
        "writing another webhook configuration",
        kubectl(
            sa,
            &[
                "patch",
                "mutatingwebhookconfiguration",
                "other-webhooks",
                "--type",
                "merge",
                "-p",
                &mark.to_string(),
            ],
            None,
        ),
    );
}

/// A `kubectl patch node` as the ServiceAccount: `Ok` or the API server's
/// refusal.
fn sa_patch(sa: &Path, node: &str, kind: &str, patch: &Value) -> Result<(), String> {
    let out = kubectl(
        sa,
        &[
            "patch",
            "node",
            node,
            "--type",
            kind,
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    if out.ok { Ok(()) } else { Err(out.stderr) }
}

/// Refused by the admission policy, by the rule whose message contains
/// `rule`.
fn refused_by_policy(what: &str, rule: &str, r: Result<(), String>) {
    let err = r
        .err()
        .unwrap_or_else(|| panic!("{what}: must be refused, was allowed"));
    assert!(
        err.contains("ValidatingAdmissionPolicy")
            && err.contains("nodegate-node-changes")
            && err.contains(rule),
        "{what}: refused, but not by the policy's rule {rule:?}: {err}"
    );
}

/// deploy/'s ValidatingAdmissionPolicy, on the real API server, with the
/// ServiceAccount's token: foreign taints, labels, other annotations and the
/// rest of the spec are refused; removing the managed taint and writing
/// nodegate.dev/ annotations (what the untaint patch does) is allowed.
async fn admission_policy_limits_node_changes(cluster: &TestCluster, sa: &Path) {
    let node = "vap-0";
    // Not a nodegate taint at index 0, the managed one at index 1.
    cluster
        .create_node(&fake_node(
            node,
            &[("example.com/pool", "vap")],
            &[
                ("example.com/foreign", "", "NoSchedule"),
                (TAINT, "", "NoSchedule"),
            ],
        ))
        .await;
    // The policy takes effect once the API server has loaded it: wait for
    // the first refusal.
    let remove_foreign = json!([
        {"op": "test", "path": "/spec/taints/0/key", "value": "example.com/foreign"},
        {"op": "remove", "path": "/spec/taints/0"},
    ]);
    let first = wait_for(
        "the admission policy to refuse removing a foreign taint",
        Duration::from_secs(30),
        || async {
            match sa_patch(sa, node, "json", &remove_foreign) {
                Ok(()) => panic!("removing a foreign taint was allowed"),
                Err(e) if e.contains("ValidatingAdmissionPolicy") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("foreign taint: {}", first.trim());
    assert!(first.contains("another taint changed"), "{first}");
    refused_by_policy(
        "add a foreign taint",
        "another taint changed",
        sa_patch(
            sa,
            node,
            "json",
            &json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "example.com/other", "effect": "NoSchedule"}}]),
        ),
    );
    refused_by_policy(
        "change a label",
        "labels",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"labels": {"example.com/pool": "other"}}}),
        ),
    );
    refused_by_policy(
        "add a label",
        "labels",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"labels": {"nodegate.dev/x": "y"}}}),
        ),
    );
    refused_by_policy(
        "write another annotation",
        "only nodegate.dev/ annotations",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"annotations": {"example.com/note": "x"}}}),
        ),
    );
    refused_by_policy(
        "cordon",
        "no node spec field",
        sa_patch(sa, node, "merge", &json!({"spec": {"unschedulable": true}})),
    );
    refused_by_policy(
        "set providerID",
        "no node spec field",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"spec": {"providerID": "kwok://x"}}),
        ),
    );
    // What the untaint patch does: remove the managed taint, record opened-at.
    sa_patch(
        sa,
        node,
        "json",
        &json!([
            {"op": "test", "path": "/spec/taints/1/key", "value": TAINT},
            {"op": "remove", "path": "/spec/taints/1"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1opened-at", "value": "2026-01-01T00:00:00.000Z"},
        ]),
    )
    .unwrap_or_else(|e| panic!("removing the managed taint with opened-at must be allowed: {e}"));
    // And the timed-out mark; and putting a managed taint back.
    sa_patch(
        sa,
        node,
        "merge",
        &json!({"metadata": {"annotations": {"nodegate.dev/timed-out": "2026-01-01T00:00:00.000Z"}}}),
    )
    .unwrap_or_else(|e| panic!("writing nodegate.dev/timed-out must be allowed: {e}"));
    sa_patch(
        sa,
        node,
        "json",
        &json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": TAINT, "effect": "NoSchedule"}}]),
    )
    .unwrap_or_else(|e| panic!("adding a managed taint must be allowed: {e}"));
    let n: Node = Api::all(cluster.client.clone())
        .get(node)
        .await
        .expect("get vap-0");
    let keys: Vec<String> = n
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(
        keys,
        ["example.com/foreign", TAINT],
        "the foreign taint stayed"
    );
    assert_eq!(
        n.metadata
            .labels
            .unwrap_or_default()
            .get("example.com/pool")
            .map(String::as_str),
        Some("vap")
    );
    // Out of the way of the gate scenario: an admin deletes it.
    Api::<Node>::all(cluster.client.clone())
        .delete(node, &Default::default())
        .await
        .expect("delete vap-0");

    the_policy_lets_nodegate_put_its_taint_on(cluster, sa).await;
}

/// The entrances (the late-taint net, backfill) put the startup taint on a
/// node that has none, with `nodegate.dev/gated-since`: the very patch
/// nodegate sends (`cluster::entrance::add_taint`) is allowed by the policy;
/// the same patch carrying anything more is not.
async fn the_policy_lets_nodegate_put_its_taint_on(cluster: &TestCluster, sa: &Path) {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    // No taints at all (the patch creates spec.taints), and a node that
    // already carries a foreign one (the patch appends).
    cluster
        .create_node(&fake_node("vap-bare", &[("example.com/pool", "vap")], &[]))
        .await;
    cluster
        .create_node(&fake_node(
            "vap-foreign",
            &[],
            &[("example.com/foreign", "", "NoSchedule")],
        ))
        .await;
    let startup = Taint::new(TAINT, "", "NoSchedule");
    let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a time");
    // nodegate's patch for the node as it is now, plus `extra` built from
    // that read; sent again while the node changed in between (the node
    // controller and kwok still write to a new node: the patch's
    // resourceVersion test then fails, which is not the answer sought).
    let send = |name: &'static str, extra: fn(&Node) -> Option<Value>| {
        let nodes = nodes.clone();
        let startup = startup.clone();
        async move {
            for _ in 0..50 {
                let node = nodes.get(name).await.expect("read the node");
                let mut patch = add_taint(&node_facts(&node), &startup, Some(since));
                if let Some(op) = extra(&node) {
                    patch.as_array_mut().expect("a JSON patch").push(op);
                }
                match sa_patch(sa, name, "json", &patch) {
                    Err(e) if e.contains("the server rejected our request") => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    other => return other,
                }
            }
            Err(format!("{name}: the node kept changing under the patch"))
        }
    };

    // More than nodegate's patch: refused, by the rule for what was added.
    refused_by_policy(
        "the startup taint and a label",
        "labels",
        send("vap-bare", |_| {
            Some(
                json!({"op": "add", "path": "/metadata/labels/example.com~1gated", "value": "yes"}),
            )
        })
        .await,
    );
    refused_by_policy(
        "the startup taint and a foreign taint",
        "another taint changed",
        send("vap-bare", |_| {
            Some(json!({"op": "add", "path": "/spec/taints/-", "value": {"key": "example.com/other", "effect": "NoSchedule"}}))
        })
        .await,
    );
    refused_by_policy(
        "the startup taint and another annotation",
        "only nodegate.dev/ annotations",
        send("vap-bare", |_| {
            Some(json!({"op": "add", "path": "/metadata/annotations/example.com~1gated", "value": "yes"}))
        })
        .await,
    );
    refused_by_policy(
        "the startup taint and a foreign taint's effect",
        "another taint changed",
        send("vap-foreign", |n| {
            let at = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .and_then(|ts| ts.iter().position(|t| t.key == "example.com/foreign"))
                .expect("the foreign taint is there");
            Some(json!({"op": "replace", "path": format!("/spec/taints/{at}/effect"), "value": "NoExecute"}))
        })
        .await,
    );

    // Exactly nodegate's patch: allowed, on both shapes of node.
    for name in ["vap-bare", "vap-foreign"] {
        send(name, |_| None).await.unwrap_or_else(|e| {
            panic!("{name}: nodegate's add-taint patch with gated-since must be allowed: {e}")
        });
        let after = nodes.get(name).await.expect("read the node");
        let keys: Vec<String> = after
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.key)
            // The node controller's own taint comes and goes on a new node.
            .filter(|k| !k.starts_with("node.kubernetes.io/"))
            .collect();
        let expected: Vec<&str> = if name == "vap-foreign" {
            vec!["example.com/foreign", TAINT]
        } else {
            vec![TAINT]
        };
        assert_eq!(
            keys, expected,
            "{name}: the startup taint added, nothing else"
        );
        assert_eq!(
            annotation(&after, "nodegate.dev/gated-since").as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "{name}: gated-since"
        );
        assert!(
            after
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| !l.keys().any(|k| k.starts_with("example.com/gated"))),
            "{name}: no label added"
        );
        nodes
            .delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
}
