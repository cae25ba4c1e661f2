//! What deploy/ ships, rendered and dry-run: the kustomize base, the chart,
//! the cert-manager variant, and the arguments the real binary must accept.

use super::*;

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

    let chart = objects(&helm_template(POLICY_API));
    dry_run(&cluster, "helm chart", &chart.iter().collect::<Vec<_>>());

    // The chart's own Namespace (namespace.create), applied for real in a
    // namespace of its own: its Pod Security labels in force, the chart's
    // pods (and its dashboard ConfigMap) pass "restricted" there.
    let own_ns = "nodegate-chart-ns";
    let rendered = must(
        "helm template --set namespace.create=true",
        run(
            &helm_bin(),
            &[
                "template",
                "nodegate",
                "deploy/helm/nodegate",
                "--namespace",
                own_ns,
                "--set",
                "namespace.create=true,dashboard.enabled=true",
            ],
            None,
        ),
    );
    let own = objects(&rendered.stdout);
    let (namespace, rest): (Vec<&Value>, Vec<&Value>) =
        own.iter().partition(|o| o["kind"] == "Namespace");
    assert_eq!(namespace.len(), 1, "namespace.create renders one Namespace");
    must(
        "create the chart's namespace",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            Some(&to_stream(&namespace)),
        ),
    );
    let enforced = must(
        "read the chart's namespace",
        kubectl(
            &cluster.kubeconfig,
            &[
                "get",
                "namespace",
                own_ns,
                "-o",
                "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}",
            ],
            None,
        ),
    );
    assert_eq!(enforced.stdout.trim(), "restricted");
    dry_run(&cluster, "helm chart in its own namespace", &rest);
    // The webhook mode, both ways (the chart picks it where the API server
    // does not serve MutatingAdmissionPolicy, as `helm template` assumes).
    let webhook = objects(&kustomize("deploy/kustomize/overlays/webhook"));
    dry_run(
        &cluster,
        "kustomize webhook overlay",
        &webhook
            .iter()
            .filter(|o| o["kind"] != "Namespace")
            .collect::<Vec<_>>(),
    );
    let chart_webhook = objects(&helm_template(&[]));
    dry_run(
        &cluster,
        "helm chart (admission: webhook)",
        &chart_webhook.iter().collect::<Vec<_>>(),
    );

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
        r#"admissionObjectSelector={"matchExpressions":[{"key":"example.com/pool","operator":"In","values":["web"]}]}"#,
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
                "admission=webhook,webhook.certManager.enabled=true",
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

/// Needs no cluster: both renderings are compared object by object, in
/// each admission mode: the base (the admission policy) against the chart
/// rendered for an API server that serves MutatingAdmissionPolicy, and the
/// webhook overlay against the chart's webhook mode.
#[test]
fn helm_chart_renders_the_same_objects_as_the_kustomize_base() {
    let base = objects(&kustomize("deploy/kustomize/base"));
    let chart = objects(&helm_template(POLICY_API));
    assert_same_objects("admission policy", &base, &chart);
    let webhook = objects(&kustomize("deploy/kustomize/overlays/webhook"));
    let chart_webhook = objects(&helm_template(&["--set", "admission=webhook"]));
    assert_same_objects("webhook", &webhook, &chart_webhook);

    the_base_pods_tolerate_and_spread(&base);
    the_base_taints_through_the_admission_policy(&base);
    the_webhook_overlay_ships_the_documented_webhook(&webhook);
    the_admission_mode_follows_the_api_server();
    // A failurePolicy other than Ignore or Fail is refused by the chart.
    let bad = helm_refuses(&["--set", "admission=webhook,webhook.failurePolicy=Never"]);
    assert!(
        bad.contains("/webhook/failurePolicy") && bad.contains("'Ignore', 'Fail'"),
        "the chart must refuse webhook.failurePolicy=Never:\n{bad}"
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

/// `helm template` with `args`, which must fail; its error output.
pub(super) fn helm_refuses(args: &[&str]) -> String {
    let mut all = vec![
        "template",
        "nodegate",
        "deploy/helm/nodegate",
        "--namespace",
        NS,
    ];
    all.extend_from_slice(args);
    let out = run(&helm_bin(), &all, None);
    assert!(!out.ok, "helm template {args:?} must fail:\n{}", out.stdout);
    out.stderr
}

fn named(objs: &[Value], kind: &str, name: &str) -> Value {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The kustomize rendering `kz` and the chart's `chart` hold the same kinds
/// and names, the same rules, specs and data, and the same pod.
fn assert_same_objects(mode: &str, kz: &[Value], chart: &[Value]) {
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
    assert_eq!(names(kz), names(chart), "{mode}: same kinds and names");
    // Same names (checked above), so each object pairs with its namesake.
    for o in kz {
        let (kind, name) = kind_name(o);
        let fields: &[&str] = match kind.as_str() {
            "ClusterRole" | "Role" => &["rules"],
            "ClusterRoleBinding" | "RoleBinding" => &["roleRef", "subjects"],
            "ValidatingAdmissionPolicy"
            | "ValidatingAdmissionPolicyBinding"
            | "MutatingAdmissionPolicy"
            | "MutatingAdmissionPolicyBinding" => &["spec"],
            "MutatingWebhookConfiguration" => &["webhooks"],
            "Secret" => &["type", "data"],
            "ConfigMap" => &["data"],
            "Service" | "PodDisruptionBudget" => &["spec"],
            _ => continue,
        };
        let mut c = named(chart, &kind, &name);
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
                "{mode}: {kind} {name} {field} differs between deploy/kustomize and deploy/helm"
            );
        }
        if kind.ends_with("Role") || kind.ends_with("RoleBinding") {
            assert_eq!(
                o["metadata"]["namespace"], c["metadata"]["namespace"],
                "{mode}: {kind} {name} namespace"
            );
        }
    }
    let (kd, cd) = (find(kz, "Deployment"), find(chart, "Deployment"));
    assert_eq!(kd["spec"]["replicas"], cd["spec"]["replicas"]);
    assert_eq!(kd["spec"]["strategy"], cd["spec"]["strategy"]);
    let pod = |d: &Value| d["spec"]["template"]["spec"].clone();
    let (kp, cp) = (pod(kd), pod(cd));
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
        assert_eq!(kp[field], cp[field], "{mode}: pod spec {field}");
    }
    let (kc, cc) = (&kp["containers"][0], &cp["containers"][0]);
    for field in [
        "image",
        "ports",
        "env",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
    ] {
        assert_eq!(kc[field], cc[field], "{mode}: container {field}");
    }
    // kustomize passes only what differs from the binary's defaults; the
    // chart passes every flag. Each flag kustomize sets, the chart sets alike.
    let (ka, ca) = (container_args(kz), container_args(chart));
    for a in &ka {
        assert!(
            ca.contains(a),
            "{mode}: kustomize passes {a:?}, the chart does not: {ca:?}"
        );
    }
}

fn the_base_pods_tolerate_and_spread(base: &[Value]) {
    let bp = &find(base, "Deployment")["spec"]["template"]["spec"];
    // The base passes no --taint, so nodegate manages its default taint:
    // the pods must tolerate that one (or a fully gated cluster could never
    // start them).
    assert!(
        !container_args(base)
            .iter()
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
    // Two replicas in two zones where there are zones, preferred (a
    // required spread leaves both Pending on nodes without the zone label).
    let spread = &bp["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
}

/// The base puts the startup taint on through the admission policy: no
/// webhook, no webhook flags, port, Secret or grants, and the policy's
/// parameters name nodegate's default taint.
fn the_base_taints_through_the_admission_policy(base: &[Value]) {
    for (kind, name) in base.iter().map(kind_name) {
        assert!(
            !(kind == "MutatingWebhookConfiguration"
                || kind == "Secret"
                || name.contains("webhook")),
            "the policy mode must not ship {kind} {name}"
        );
    }
    assert!(
        container_args(base)
            .iter()
            .all(|a| !a.starts_with("--webhook")),
        "the policy mode runs no webhook: {:?}",
        container_args(base)
    );
    // RBAC is additive: with no rule naming Secrets, webhook configurations
    // or every resource, the policy mode's account can reach neither.
    for o in base
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        for rule in o["rules"].as_array().into_iter().flatten() {
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            assert!(
                !resources
                    .iter()
                    .any(|r| *r == "*" || *r == "secrets" || r.ends_with("webhookconfigurations")),
                "the policy mode needs no Secret or webhook-configuration permission: {} {} grants {resources:?}",
                o["kind"],
                o["metadata"]["name"]
            );
        }
    }
    // The parameters are not shipped: the leader writes them
    // (--admission-params, the binding's paramRef) and they go with its Pod
    // ($POD_UID), so nodegate down never keeps new nodes closed.
    assert!(
        !base
            .iter()
            .any(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "nodegate-admission"),
        "the base ships the admission parameters"
    );
    assert!(
        container_args(base)
            .iter()
            .any(|a| a == "--admission-params=nodegate-admission"),
        "{:?}",
        container_args(base)
    );
    let deployment = named(base, "Deployment", "nodegate");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "POD_UID"
                && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"),
        "no POD_UID from the downward API: {env}"
    );
    let binding = named(
        base,
        "MutatingAdmissionPolicyBinding",
        "nodegate-startup-taint",
    );
    assert_eq!(binding["spec"]["paramRef"]["name"], "nodegate-admission");
    assert_eq!(binding["spec"]["paramRef"]["namespace"], NS);
    let policy = named(base, "MutatingAdmissionPolicy", "nodegate-startup-taint");
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"],
        json!(["CREATE"])
    );
    assert_eq!(policy["spec"]["failurePolicy"], "Ignore");
}

/// The webhook overlay: the container listens where the Service sends it,
/// and its shipped choices are the ones the docs promise.
fn the_webhook_overlay_ships_the_documented_webhook(webhook: &[Value]) {
    for kind in ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"] {
        assert!(
            webhook.iter().all(|o| o["kind"] != kind),
            "the webhook overlay must not keep the base's {kind}"
        );
    }
    let hook = &find(webhook, "MutatingWebhookConfiguration")["webhooks"][0];
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
    let c = &find(webhook, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert!(
        c["ports"].as_array().is_some_and(|ps| ps
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 9443)),
        "the container must declare the webhook port: {}",
        c["ports"]
    );
    let args = container_args(webhook);
    for a in [
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-cert-secret=nodegate-system/nodegate-webhook-tls",
        "--webhook-configuration=nodegate",
        "--webhook-host=nodegate-webhook.nodegate-system.svc",
        "--taint-new-nodes",
    ] {
        assert!(
            args.iter().any(|x| x == a),
            "the webhook overlay must pass {a}: {args:?}"
        );
    }
    let secret = named(webhook, "Secret", "nodegate-webhook-tls");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret.get("data"),
        None,
        "the Secret ships without data (nodegate fills it; a re-apply must not reset it)"
    );
}

/// `admission` empty: the policy where the API server serves
/// MutatingAdmissionPolicy (here: what `--api-versions` tells `helm
/// template`), else the webhook; `none` ships neither; bad and retired
/// values are refused naming what replaces them; a dry run renders no policy.
fn the_admission_mode_follows_the_api_server() {
    let has = |objs: &[Value], kind: &str| objs.iter().any(|o| o["kind"] == kind);
    let policy = objects(&helm_template(POLICY_API));
    assert!(
        has(&policy, "MutatingAdmissionPolicy") && !has(&policy, "MutatingWebhookConfiguration")
    );
    let webhook = objects(&helm_template(&[]));
    assert!(
        !has(&webhook, "MutatingAdmissionPolicy") && has(&webhook, "MutatingWebhookConfiguration")
    );
    let mut none_args = POLICY_API.to_vec();
    none_args.extend(["--set", "admission=none"]);
    let none = objects(&helm_template(&none_args));
    assert!(!has(&none, "MutatingAdmissionPolicy") && !has(&none, "MutatingWebhookConfiguration"));
    assert!(
        !none
            .iter()
            .any(|o| o["kind"] == "Secret" || kind_name(o).1.contains("webhook")),
        "admission: none ships nothing of the webhook"
    );
    let mut dry = POLICY_API.to_vec();
    dry.extend(["--set", "config.dryRun=true"]);
    assert!(
        !has(&objects(&helm_template(&dry)), "MutatingAdmissionPolicy"),
        "a dry run must not install a policy that taints nodes it never opens"
    );
    let bad = helm_refuses(&["--set", "admission=sometimes"]);
    assert!(
        bad.contains("/admission") && bad.contains("'policy', 'webhook', 'none'"),
        "{bad}"
    );
    let retired = helm_refuses(&["--set", "webhook.enabled=false"]);
    assert!(
        retired.contains("webhook.enabled was replaced by admission"),
        "{retired}"
    );
}

/// The kustomize cert-manager overlay and the chart with
/// webhook.certManager.enabled: the same objects, the certificate from a
/// mounted Secret, and no access to Secrets or webhook configurations.
fn cert_manager_variant_is_the_same_both_ways() {
    let kz = objects(&kustomize("deploy/kustomize/overlays/cert-manager"));
    let chart = objects(&helm_template(&[
        "--set",
        "admission=webhook,webhook.certManager.enabled=true",
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
pub(super) fn container_args(objs: &[Value]) -> Vec<String> {
    find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

/// Runs the real binary with `args` and a kubeconfig that cannot exist:
/// settings are validated first (exit 2 on any bad flag or value), so
/// reaching "cannot read the kubeconfig" (exit 1) means nodegate took every
/// argument.
pub(super) fn assert_accepted(what: &str, args: &[String]) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run nodegate: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && stderr.contains("cannot read the kubeconfig"),
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
        "helm chart (admission: none, no net)",
        &container_args(&objects(&helm_template(&[
            "--set",
            "admission=none,config.taintNewNodes=false",
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

/// Hardening: nodegate did not tolerate the taints it may add
/// itself, so a NoExecute rule evicted it and nothing took the taint off.
/// The chart writes `config.conditionTaints` to its ConfigMap (nodegate
/// takes it) and its pods tolerate each rule's key and the re-gate taint;
/// the kustomize base tolerates the default re-gate taint.
#[test]
fn the_pods_tolerate_every_taint_nodegate_may_add() {
    let tolerated = |objs: &[Value]| -> Vec<String> {
        find(objs, "Deployment")["spec"]["template"]["spec"]["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .filter(|t| t["operator"] == "Exists" && t.get("effect").is_none())
            .filter_map(|t| t["key"].as_str().map(str::to_string))
            .collect()
    };
    let base = objects(&kustomize("deploy/kustomize/base"));
    assert!(
        tolerated(&base).contains(&"nodegate.dev/degraded".to_string()),
        "{:?}",
        tolerated(&base)
    );
    let chart = objects(&helm_template(&[
        "--set",
        "config.regateTaint=example.com/regated:NoSchedule",
        "--set-json",
        r#"config.conditionTaints=[{"name":"gpu-broken","conditions":[{"type":"GPUDriverReady","status":"False","for":"1m"}],"taint":{"key":"example.com/gpu","effect":"NoExecute"}}]"#,
    ]));
    let keys = tolerated(&chart);
    for key in [
        "nodegate.dev/initializing",
        "example.com/regated",
        "example.com/gpu",
    ] {
        assert!(
            keys.contains(&key.to_string()),
            "{key} not tolerated: {keys:?}"
        );
    }
    let file = find(&chart, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml in the ConfigMap")
        .to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, file).expect("write config");
    let args: Vec<String> = container_args(&chart)
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
        "conditionTaints must pass --config: {args:?}"
    );
    assert_accepted("helm chart (conditionTaints)", &args);
}

/// The ClusterRole rules for `resourceslices`, in every ClusterRole of `objs`.
fn resourceslice_rules(objs: &[Value]) -> Vec<Value> {
    objs.iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "resourceslices"))
        })
        .collect()
}

/// `draDrivers` (semantics.md §6.8): the chart grants list and watch on
/// ResourceSlices, and writes the key to its ConfigMap, only when it is set;
/// the kustomize base never grants them, its `dra-drivers` component grants
/// exactly what the chart does.
#[test]
fn resourceslices_are_granted_only_with_dra_drivers() {
    assert_eq!(
        resourceslice_rules(&objects(&helm_template(&[]))),
        Vec::<Value>::new()
    );
    assert_eq!(
        resourceslice_rules(&objects(&kustomize("deploy/kustomize/base"))),
        Vec::<Value>::new()
    );
    let chart = objects(&helm_template(&[
        "--set-json",
        r#"config.draDrivers=[{"driver":"gpu.nvidia.com","nodeSelector":"nvidia.com/gpu.present=true"}]"#,
        "--set-json",
        r#"config.criticalResources=[{"resource":"nvidia.com/gpu"}]"#,
    ]));
    let want = vec![json!({
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["list", "watch"],
    })];
    assert_eq!(resourceslice_rules(&chart), want);
    let config = find(&chart, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let file: Value = serde_saphyr::from_str(&config).expect("config.yaml parses");
    assert_eq!(
        file["draDrivers"][0]["driver"], "gpu.nvidia.com",
        "{config}"
    );
    assert_eq!(
        file["criticalResources"][0]["resource"], "nvidia.com/gpu",
        "{config}"
    );
    let component = std::fs::read_to_string(
        repo_root().join("deploy/kustomize/components/dra-drivers/rbac.yaml"),
    )
    .expect("the dra-drivers component's rbac.yaml");
    assert_eq!(resourceslice_rules(&objects(&component)), want);
}

/// What the chart's defaults run differently from the kustomize base (and
/// the binary), key by key of the config file, each with its reason; the
/// chart's README lists each too. Anything else must be the same.
const HELM_DIFFERS: &[(&str, &str)] = &[(
    "leaseNamespace",
    "the chart names the release namespace; the base leaves it to $POD_NAMESPACE, the same namespace",
)];

/// Every setting nodegate would run with in `objs`' Deployment: its args,
/// and its config file from the ConfigMap the chart mounts, read by
/// nodegate's own settings code (what `config check -o json` prints).
fn effective_settings(what: &str, objs: &[Value]) -> serde_json::Map<String, Value> {
    use clap::Parser as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut words = vec!["nodegate".to_string()];
    for a in container_args(objs) {
        match a.strip_prefix("--config=") {
            Some(mounted) => {
                let file = std::path::Path::new(mounted)
                    .file_name()
                    .and_then(|f| f.to_str())
                    .expect("a file name")
                    .to_string();
                let cm = objs
                    .iter()
                    .find(|o| o["kind"] == "ConfigMap" && o["data"][&file].is_string())
                    .unwrap_or_else(|| panic!("{what}: no ConfigMap holds {file}"));
                let path = dir.path().join(&file);
                std::fs::write(&path, cm["data"][&file].as_str().unwrap_or_default())
                    .expect("write the config file");
                words.push(format!("--config={}", path.display()));
            }
            None => words.push(a),
        }
    }
    let cli = nodegate::settings::cli::Cli::try_parse_from(&words)
        .unwrap_or_else(|e| panic!("{what}: nodegate refuses {words:?}: {e}"));
    let nodegate::settings::cli::Command::Run(run) = cli.command else {
        panic!("{what}: the container does not run `nodegate run`: {words:?}")
    };
    match nodegate::commands::config_check::run_meaning(&run) {
        Ok(Value::Object(m)) => m,
        other => panic!("{what}: {other:?}"),
    }
}

/// One gate whichever way it is installed: the chart with its defaults and
/// the kustomize base make nodegate run with the same value for every key
/// of the config file, in both admission modes, but for HELM_DIFFERS.
#[test]
fn helm_and_kustomize_run_the_same_gate() {
    let readme = std::fs::read_to_string(repo_root().join("deploy/helm/nodegate/README.md"))
        .expect("the chart's README");
    for (mode, kz, chart) in [
        (
            "admission policy",
            objects(&kustomize("deploy/kustomize/base")),
            objects(&helm_template(POLICY_API)),
        ),
        (
            "webhook",
            objects(&kustomize("deploy/kustomize/overlays/webhook")),
            objects(&helm_template(&["--set", "admission=webhook"])),
        ),
    ] {
        let k = effective_settings(&format!("kustomize, {mode}"), &kz);
        let h = effective_settings(&format!("helm, {mode}"), &chart);
        let keys: std::collections::BTreeSet<&String> = k.keys().chain(h.keys()).collect();
        let mut unlisted = Vec::new();
        for key in keys {
            if k.get(key) != h.get(key) && !HELM_DIFFERS.iter().any(|(d, _)| d == key) {
                unlisted.push(format!(
                    "{key}: kustomize {}, helm {}",
                    k.get(key).unwrap_or(&Value::Null),
                    h.get(key).unwrap_or(&Value::Null)
                ));
            }
        }
        assert!(
            unlisted.is_empty(),
            "{mode}: the chart and the kustomize base run different gates:\n{}",
            unlisted.join("\n")
        );
        for (key, why) in HELM_DIFFERS {
            assert_ne!(
                k.get(*key),
                h.get(*key),
                "{mode}: {key} is listed as a difference ({why}) but is the same"
            );
            assert!(
                readme.contains(&format!("`{key}`")),
                "the chart's README does not name the difference {key} ({why})"
            );
        }
    }
}

/// The HTTP port (/metrics carries node names) is closed by default: in the
/// kustomize base and the chart, both admission modes, the NetworkPolicies
/// on nodegate's pods admit port `http` only from named peers, and the
/// probes need no ingress (exec probes over loopback); the webhook mode
/// keeps its port reachable.
#[test]
fn the_metrics_port_is_closed_by_the_shipped_network_policy() {
    for (what, objs, webhook) in [
        (
            "kustomize base",
            objects(&kustomize("deploy/kustomize/base")),
            false,
        ),
        (
            "kustomize webhook",
            objects(&kustomize("deploy/kustomize/overlays/webhook")),
            true,
        ),
        ("chart, policy", objects(&helm_template(POLICY_API)), false),
        (
            "chart, webhook",
            objects(&helm_template(&["--set", "admission=webhook"])),
            true,
        ),
    ] {
        let policies: Vec<&Value> = objs
            .iter()
            .filter(|o| o["kind"] == "NetworkPolicy")
            .collect();
        let rules: Vec<&Value> = policies
            .iter()
            .flat_map(|p| p["spec"]["ingress"].as_array().into_iter().flatten())
            .collect();
        let opens = |port: &str| -> Vec<&&Value> {
            rules
                .iter()
                .filter(|r| {
                    r["ports"]
                        .as_array()
                        .is_none_or(|ps| ps.iter().any(|p| p["port"] == port))
                })
                .collect()
        };
        let http = opens("http");
        assert!(
            !http.is_empty(),
            "{what}: no NetworkPolicy admits the HTTP port at all"
        );
        for r in &http {
            let from = r["from"].as_array().map_or(0, Vec::len);
            assert!(from > 0, "{what}: the HTTP port is open to every peer: {r}");
        }
        if webhook {
            assert!(
                !opens("webhook").is_empty(),
                "{what}: the webhook port is closed"
            );
        }
        let container = &find(&objs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        for probe in ["livenessProbe", "readinessProbe"] {
            assert!(
                container[probe]["httpGet"].is_null() && !container[probe]["exec"].is_null(),
                "{what}: {probe} needs ingress to the HTTP port: {}",
                container[probe]
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 3. The chart's optional objects: the alerts, the dashboard, the namespace
// ---------------------------------------------------------------------------

/// deploy/monitoring's files and the chart's copies of them, which the
/// chart reads (Helm cannot read a file outside the chart).
const MONITORING_COPIES: &[(&str, &str)] = &[
    (
        "deploy/monitoring/prometheusrule.yaml",
        "deploy/helm/nodegate/files/prometheusrule.yaml",
    ),
    (
        "deploy/monitoring/grafana-dashboard.json",
        "deploy/helm/nodegate/files/grafana-dashboard.json",
    ),
];

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel))
        .unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// Issue 38: the chart's alerts and dashboard are deploy/monitoring's, byte
/// for byte, so a change to one that misses the other fails here.
#[test]
fn the_chart_s_monitoring_files_are_deploy_monitoring_s() {
    let mut differ = Vec::new();
    for (source, copy) in MONITORING_COPIES {
        if repo_file(source) != repo_file(copy) {
            differ.push(format!("{copy} differs from {source}: cp {source} {copy}"));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// Issue 38: `prometheusRule.enabled` renders a PrometheusRule with exactly
/// deploy/monitoring's rule groups (the alerts' own `{{ $labels }}` left as
/// written), its labels and namespace as asked; `dashboard.enabled` a
/// ConfigMap holding deploy/monitoring's dashboard, labelled for Grafana's
/// sidecar. Neither by default.
#[test]
fn prometheus_rule_and_dashboard_render_deploy_monitoring_s() {
    let defaults = objects(&helm_template(&[]));
    assert!(
        !defaults.iter().any(|o| o["kind"] == "PrometheusRule"
            || o["metadata"]["name"] == "nodegate-dashboard"),
        "neither the alerts nor the dashboard by default"
    );

    let objs = objects(&helm_template(&[
        "--set",
        "prometheusRule.enabled=true,prometheusRule.labels.release=kube-prometheus-stack",
        "--set",
        "dashboard.enabled=true",
    ]));
    let rule = find(&objs, "PrometheusRule");
    let shipped: Value = serde_saphyr::from_str(&repo_file(MONITORING_COPIES[0].0))
        .expect("deploy/monitoring/prometheusrule.yaml parses");
    assert!(
        shipped["spec"]["groups"]
            .as_array()
            .is_some_and(|g| !g.is_empty()),
        "deploy/monitoring has rule groups"
    );
    assert_eq!(
        rule["spec"]["groups"], shipped["spec"]["groups"],
        "the chart's rule groups are deploy/monitoring's"
    );
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], NS);
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(
        rule["metadata"]["labels"]["app.kubernetes.io/instance"],
        "nodegate"
    );

    let dashboard = named(&objs, "ConfigMap", "nodegate-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json_text = dashboard["data"]["nodegate.json"].as_str().unwrap_or("");
    let rendered: Value = serde_json::from_str(json_text)
        .unwrap_or_else(|e| panic!("the dashboard is not JSON: {e}"));
    let shipped: Value = serde_json::from_str(&repo_file(MONITORING_COPIES[1].0))
        .expect("deploy/monitoring/grafana-dashboard.json parses");
    assert_eq!(rendered, shipped, "the dashboard is deploy/monitoring's");

    // Elsewhere, and with the sidecar's own label.
    let moved = objects(&helm_template(&[
        "--set",
        "prometheusRule.enabled=true,prometheusRule.namespace=monitoring",
        "--set",
        "dashboard.enabled=true,dashboard.namespace=grafana,dashboard.labels.grafana_dashboard=nodegate",
    ]));
    assert_eq!(
        find(&moved, "PrometheusRule")["metadata"]["namespace"],
        "monitoring"
    );
    let dashboard = named(&moved, "ConfigMap", "nodegate-dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "grafana");
    assert_eq!(
        dashboard["metadata"]["labels"]["grafana_dashboard"],
        "nodegate"
    );
}

/// Issue 38: `namespace.create` renders the release namespace with the Pod
/// Security labels of deploy/kustomize/base's Namespace; off by default
/// (it cannot be combined with `--create-namespace`).
#[test]
fn namespace_create_renders_the_release_namespace_with_pod_security_labels() {
    let defaults = objects(&helm_template(&[]));
    assert!(
        !defaults.iter().any(|o| o["kind"] == "Namespace"),
        "no Namespace by default"
    );
    let objs = objects(&helm_template(&["--set", "namespace.create=true"]));
    let ns = find(&objs, "Namespace");
    assert_eq!(ns["metadata"]["name"], NS);
    let base = objects(&kustomize("deploy/kustomize/base"));
    let base_labels = &find(&base, "Namespace")["metadata"]["labels"];
    let labels = &ns["metadata"]["labels"];
    for level in ["enforce", "warn", "audit"] {
        let key = format!("pod-security.kubernetes.io/{level}");
        assert_eq!(labels[&key], "restricted", "{key}");
        assert_eq!(labels[&key], base_labels[&key], "{key}: as the base");
    }
    // Configurable, e.g. kept on uninstall, or a level chosen.
    let objs = objects(&helm_template(&[
        "--set",
        "namespace.create=true,namespace.labels.pod-security\\.kubernetes\\.io/warn=baseline",
        "--set",
        "namespace.annotations.helm\\.sh/resource-policy=keep",
    ]));
    let ns = find(&objs, "Namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/warn"],
        "baseline"
    );
    assert_eq!(
        ns["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
}

/// Issue 38: what the chart README says of `namespace.create`, with Helm on
/// a real API server: a first install with `--create-namespace` gets the
/// namespace with its Pod Security labels; without `--create-namespace`, or
/// into a namespace that already exists, the install is refused; `helm
/// uninstall` deletes the namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_create_installs_only_with_create_namespace() {
    let cluster = TestCluster::start("deploy-namespace-create").await;
    let kubeconfig = cluster.kubeconfig.to_str().expect("utf-8 path");
    let helm = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", kubeconfig]);
        run(&helm_bin(), &all, None)
    };
    let install = |release: &str, ns: &str, extra: &[&str]| {
        let mut args = vec![
            "install",
            release,
            "deploy/helm/nodegate",
            "--namespace",
            ns,
            "--set",
            "namespace.create=true,image.repository=nodegate.invalid/nodegate",
        ];
        args.extend_from_slice(extra);
        helm(&args)
    };
    let label = |ns: &str| {
        kubectl(
            &cluster.kubeconfig,
            &[
                "get",
                "namespace",
                ns,
                "-o",
                "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}",
            ],
            None,
        )
        .stdout
    };

    must(
        "helm install --create-namespace --set namespace.create=true",
        install("first", "ng-first", &["--create-namespace"]),
    );
    assert_eq!(label("ng-first"), "restricted");

    let without = install("bare", "ng-bare", &[]);
    assert!(
        !without.ok,
        "without --create-namespace the install must fail:\n{}",
        without.stdout
    );

    must(
        "kubectl create namespace",
        kubectl(
            &cluster.kubeconfig,
            &["create", "namespace", "ng-existing"],
            None,
        ),
    );
    let existing = install("existing", "ng-existing", &[]);
    assert!(
        !existing.ok && existing.stderr.contains("invalid ownership metadata"),
        "an existing namespace must be refused as not Helm's:\n{}",
        existing.stderr
    );

    must(
        "helm uninstall",
        helm(&["uninstall", "first", "--namespace", "ng-first"]),
    );
    let after = kubectl(
        &cluster.kubeconfig,
        &[
            "get",
            "namespace",
            "ng-first",
            "-o",
            "jsonpath={.status.phase}",
        ],
        None,
    );
    assert!(
        !after.ok || after.stdout == "Terminating",
        "helm uninstall must delete the namespace: {} {}",
        after.stdout,
        after.stderr
    );
}
