use super::*;

fn managed() -> Vec<ManagedTaint> {
    vec![ManagedTaint::new("nodegate.dev/initializing", "NoSchedule")]
}

fn review(kind: &str, operation: &str, object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "nodes"},
            "name": "n1",
            "operation": operation,
            "userInfo": {"username": "system:node:n1"},
            "object": object,
            "dryRun": false,
        }
    }))
    .expect("static review")
}

fn node(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"pool": "a"}}, "spec": spec})
}

fn patch_of(a: &Answer) -> Value {
    // kube serializes the patch's bytes as a list of numbers, which the
    // API server reads as well as base64.
    let bytes: Vec<u8> =
        serde_json::from_value(a.body["response"]["patch"].clone()).expect("a patch");
    serde_json::from_slice(&bytes).expect("JSON patch")
}

fn assert_allowed(a: &Answer) {
    assert_eq!(a.body["apiVersion"], "admission.k8s.io/v1", "{}", a.body);
    assert_eq!(a.body["kind"], "AdmissionReview", "{}", a.body);
    assert_eq!(a.body["response"]["allowed"], true, "{}", a.body);
}

#[test]
fn a_dry_run_admits_a_node_it_would_taint_unchanged_and_says_so() {
    let a = answer(
        &review("Node", "CREATE", node(json!({}))),
        &Scope::default(),
        &managed(),
        true,
    );
    assert_allowed(&a);
    assert_eq!(a.result, AdmissionResult::WouldTaint);
    assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
    assert!(a.body["response"].get("patchType").is_none(), "{}", a.body);
    let warning = a.body["response"]["warnings"][0].as_str().unwrap_or("");
    assert!(
        warning.contains("dry run") && warning.contains("nodegate.dev/initializing"),
        "{}",
        a.body
    );
    // A node it would leave alone anyway is plainly unchanged.
    let gated =
        node(json!({"taints": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]}));
    let a = answer(
        &review("Node", "CREATE", gated),
        &Scope::default(),
        &managed(),
        true,
    );
    assert_eq!(a.result, AdmissionResult::Unchanged);
}

#[test]
fn a_node_without_taints_gets_a_new_list() {
    let a = answer(
        &review("Node", "CREATE", node(json!({}))),
        &Scope::default(),
        &managed(),
        false,
    );
    assert_allowed(&a);
    assert_eq!(a.result, AdmissionResult::Tainted);
    assert_eq!(a.node.as_deref(), Some("n1"));
    assert_eq!(
        a.body["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    assert_eq!(a.body["response"]["patchType"], "JSONPatch");
    assert_eq!(
        patch_of(&a),
        json!([{"op": "add", "path": "/spec/taints", "value": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]}])
    );
}

#[test]
fn a_node_with_other_taints_gets_one_appended() {
    for taints in [json!([]), json!([{"key": "other", "effect": "NoExecute"}])] {
        let a = answer(
            &review("Node", "CREATE", node(json!({"taints": taints}))),
            &Scope::default(),
            &managed(),
            false,
        );
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::Tainted);
        assert_eq!(
            patch_of(&a),
            json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "nodegate.dev/initializing", "effect": "NoSchedule"}}])
        );
    }
}

#[test]
fn a_gated_ignored_or_foreign_node_is_admitted_unchanged() {
    let gated =
        node(json!({"taints": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]}));
    let mut ignored = node(json!({}));
    ignored["metadata"]["annotations"] = json!({"nodegate.dev/ignore": "true"});
    let foreign = Scope {
        node_selector: Some("pool=b".parse().expect("selector")),
    };
    for (body, scope, why) in [
        (gated, Scope::default(), "already carries"),
        (ignored, Scope::default(), "nodegate.dev/ignore"),
        (node(json!({})), foreign, "node selector"),
    ] {
        let a = answer(&review("Node", "CREATE", body), &scope, &managed(), false);
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::Unchanged);
        assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
        assert!(a.note.as_deref().is_some_and(|n| n.contains(why)), "{a:?}");
    }
}

#[test]
fn garbage_is_admitted_with_a_warning_and_counted_as_an_error() {
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"not json at all".to_vec(), "", "not JSON"),
        (b"{\"kind\": 7}".to_vec(), "", "no request"),
        (b"[1, 2]".to_vec(), "", "not an AdmissionReview"),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            "",
            "no request",
        ),
        (
            review("Pod", "CREATE", json!({"metadata": {"name": "p"}})),
            "705ab4f5-6393-11e8-b7cc-42010a800002",
            "expected a Node",
        ),
        (
            review("Node", "UPDATE", node(json!({}))),
            "705ab4f5-6393-11e8-b7cc-42010a800002",
            "expected a CREATE",
        ),
        (
            review("Node", "CREATE", json!({"metadata": {"name": 5}})),
            "705ab4f5-6393-11e8-b7cc-42010a800002",
            "",
        ),
        (
            br#"{"request": {"uid": "u-1", "operation": 3}}"#.to_vec(),
            "u-1",
            "not an AdmissionReview",
        ),
    ];
    for (body, uid, why) in cases {
        let a = answer(&body, &Scope::default(), &managed(), false);
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::Error, "{}", a.body);
        assert_eq!(a.body["response"]["uid"], uid, "{}", a.body);
        assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
        let warning = a.body["response"]["warnings"][0]
            .as_str()
            .unwrap_or_default();
        assert!(
            warning.starts_with("nodegate admitted this object unchanged: ")
                && warning.contains(why),
            "{warning:?} for {}",
            String::from_utf8_lossy(&body)
        );
    }
}

fn review_as(user: Value, object: Value) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&review("Node", "CREATE", object)).expect("JSON");
    v["request"]["userInfo"] = user;
    serde_json::to_vec(&v).expect("JSON")
}

#[test]
fn unknown_fields_of_any_size_are_skipped() {
    let mut object = node(json!({"pad": vec![0u8; 200_000], "podCIDR": "10.0.0.0/24"}));
    object["metadata"]["managedFields"] = json!([{"manager": "x", "fieldsV1": {"f:a": {}}}]);
    object["status"] = json!({"images": [{"names": ["a"], "sizeBytes": 1}]});
    let mut body: Value = serde_json::from_slice(&review("Node", "CREATE", object)).expect("JSON");
    body["request"]["unknown"] = json!({"deep": [[[[1]]]]});
    let a = answer(
        &serde_json::to_vec(&body).expect("JSON"),
        &Scope::default(),
        &managed(),
        false,
    );
    assert_eq!(a.result, AdmissionResult::Tainted, "{a:?}");
    assert_eq!(a.node.as_deref(), Some("n1"));
}

#[test]
fn a_node_identity_cannot_skip_or_date_its_own_gate() {
    let mut object = node(json!({}));
    object["metadata"]["annotations"] = json!({
        "nodegate.dev/ignore": "true",
        "nodegate.dev/gated-since": "2000-01-01T00:00:00Z",
        "nodegate.dev/opened-by": "manual",
        "example.com/kept": "yes",
    });
    let kubelet =
        json!({"username": "system:node:n1", "groups": ["system:nodes", "system:authenticated"]});
    let a = answer(
        &review_as(kubelet, object.clone()),
        &Scope::default(),
        &managed(),
        false,
    );
    assert_allowed(&a);
    assert_eq!(a.result, AdmissionResult::Tainted, "{a:?}");
    let patch = patch_of(&a);
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/spec/taints", "value": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]},
            {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1gated-since"},
            {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1ignore"},
            {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1opened-by"},
        ])
    );
    let applied = json_patch::patch(
        &mut object.clone(),
        &serde_json::from_value::<json_patch::Patch>(patch).expect("a patch"),
    );
    assert!(
        applied.is_ok(),
        "the patch applies to the object: {applied:?}"
    );
    // Anyone else may still exempt a node at creation.
    let admin = json!({"username": "admin", "groups": ["system:masters"]});
    let a = answer(
        &review_as(admin, object.clone()),
        &Scope::default(),
        &managed(),
        false,
    );
    assert_eq!(a.result, AdmissionResult::Unchanged, "{a:?}");
    // A dry run still decides without them, and removes nothing.
    let kubelet = json!({"username": "system:node:n1", "groups": ["system:nodes"]});
    let a = answer(
        &review_as(kubelet, object),
        &Scope::default(),
        &managed(),
        true,
    );
    assert_eq!(a.result, AdmissionResult::WouldTaint, "{a:?}");
    assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
}

#[test]
fn text_from_the_review_cannot_start_a_line() {
    let mut body: Value =
        serde_json::from_slice(&review("Node", "CREATE", node(json!({})))).expect("JSON");
    body["request"]["operation"] = json!("X\nINFO forged");
    let a = answer(
        &serde_json::to_vec(&body).expect("JSON"),
        &Scope::default(),
        &managed(),
        false,
    );
    assert_eq!(a.result, AdmissionResult::Error);
    let note = a.note.unwrap_or_default();
    assert!(
        note.contains("X\\nINFO forged") && !note.contains('\n'),
        "{note:?}"
    );
    let warning = a.body["response"]["warnings"][0]
        .as_str()
        .unwrap_or_default();
    assert!(!warning.contains('\n'), "{warning:?}");
    // A name with a newline is escaped too.
    let mut named = node(json!({}));
    named["metadata"]["name"] = json!("n1\nINFO forged");
    let a = answer(
        &review("Node", "CREATE", named),
        &Scope::default(),
        &managed(),
        false,
    );
    assert!(
        a.node.as_deref().is_some_and(|n| !n.contains('\n')),
        "{a:?}"
    );
}

#[test]
fn the_uid_is_sniffed_from_the_first_bytes_only_when_plain() {
    // As the API server writes it: the request's uid first.
    let body = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","kind":{"group":"","version":"v1","kind":"Node"},"object":{"#;
    assert_eq!(
        parse::sniff_uid(body),
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    assert_eq!(
        parse::sniff_uid(br#"{"request": {"uid" : "a-1", "x": 1"#),
        "a-1"
    );
    assert_eq!(parse::sniff_uid(br#"{"uid": "a-1"}"#), "");
    assert_eq!(parse::sniff_uid(br#"{"request": {"uid": "a\n1"}}"#), "");
    assert_eq!(parse::sniff_uid(br#"{"request": {"uid": 5}}"#), "");
}

#[test]
fn with_no_leader_a_node_is_admitted_unchanged_and_says_why() {
    let hold = Hold::NoLeader("no replica has renewed lease ns/x for 31s".into());
    let a = answer_held(
        &review("Node", "CREATE", node(json!({}))),
        &Scope::default(),
        &managed(),
        &StartupTaints::default(),
        &hold,
    );
    assert_allowed(&a);
    assert_eq!(a.result, AdmissionResult::NoLeader);
    assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
    let warning = a.body["response"]["warnings"][0].as_str().unwrap_or("");
    assert!(warning.contains("lease ns/x"), "{}", a.body);
}

/// The webhook adds the taint chosen for the node's labels (`--autoscaler
/// auto`): Karpenter's nodes the readiness key, GKE's the CA-prefix key,
/// the rest the first `--taint`.
#[test]
fn the_taint_added_is_the_one_chosen_for_the_labels() {
    use nodegate_core::rules::startup::Autoscaler;
    let first = managed()[0].clone();
    let startup = StartupTaints::new(Vec::new(), &[Autoscaler::Auto], first.clone());
    let all = startup.managed(&[first]);
    for (label, key) in [
        ("karpenter.sh/nodepool", "readiness.k8s.io/nodegate"),
        (
            "cloud.google.com/gke-nodepool",
            "startup-taint.cluster-autoscaler.kubernetes.io/nodegate",
        ),
        ("pool", "nodegate.dev/initializing"),
    ] {
        let object = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {label: "a"}}, "spec": {}});
        let a = answer_held(
            &review("Node", "CREATE", object),
            &Scope::default(),
            &all,
            &startup,
            &Hold::No,
        );
        assert_eq!(a.result, AdmissionResult::Tainted, "{label}: {}", a.body);
        assert_eq!(
            patch_of(&a),
            json!([{"op": "add", "path": "/spec/taints", "value": [{"key": key, "effect": "NoSchedule"}]}]),
            "{label}"
        );
    }
}
