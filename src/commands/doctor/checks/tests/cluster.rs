//! Table tests of the checks that read the cluster itself (Lease, nodes,
//! admission, RBAC), and of the presets' defaults.

use super::*;

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[test]
fn leader_rows() {
    let on = settings(&["--leader-elect"]);
    let off = settings(&[]);
    let now = ts(10_000);
    let lease = |holder: &str, renewed: Option<i64>, dur: Option<u64>| LeaseSeen {
        holder: holder.to_string(),
        renewed: renewed.map(ts),
        duration: dur.map(Duration::from_secs),
    };
    // (settings, lease, status, live)
    let rows: [(&RunSettings, Option<LeaseSeen>, Status, Option<bool>); 7] = [
        (&off, None, Status::Skipped, None),
        (&on, None, Status::Problem, Some(false)),
        (
            &on,
            Some(lease("", Some(9_999), Some(15))),
            Status::Problem,
            Some(false),
        ),
        (
            &on,
            Some(lease("a", Some(9_990), Some(15))),
            Status::Ok,
            Some(true),
        ),
        (
            &on,
            Some(lease("a", Some(9_980), Some(15))),
            Status::Problem,
            Some(false),
        ),
        // No leaseDurationSeconds: the configured --lease-duration (15s).
        (
            &on,
            Some(lease("a", Some(9_980), None)),
            Status::Problem,
            Some(false),
        ),
        (
            &on,
            Some(lease("a", None, Some(15))),
            Status::Ok,
            Some(true),
        ),
    ];
    for (s, l, want, live) in rows {
        let (c, got) = leader::check(&s.leader_election, "nodegate-system", l.as_ref(), now);
        assert_eq!((c.status, got), (want, live), "{l:?}: {c:?}");
        assert!(c.subject.contains("nodegate-system/nodegate"), "{c:?}");
    }
}

fn node(name: &str, taint: Option<&str>, created: i64) -> NodeSeen {
    NodeSeen {
        name: name.to_string(),
        taints: taint
            .map(|k| Taint {
                key: k.to_string(),
                value: String::new(),
                effect: "NoSchedule".to_string(),
            })
            .into_iter()
            .collect(),
        created: Some(ts(created)),
        ..NodeSeen::default()
    }
}

#[test]
fn nodes_without_a_live_gate_rows() {
    let s = settings(&["--timeout", "10m", "--regate-after", "1m"]);
    let scoped = settings(&["--node-selector", "pool=a"]);
    let now = ts(100_000);
    let init = Some("nodegate.dev/initializing");
    let timed_out = NodeSeen {
        timed_out: true,
        ..node("kept", init, 99_990)
    };
    let suspended = NodeSeen {
        suspended: true,
        ..node("held", init, 1)
    };
    let regated = NodeSeen {
        gated_since: Some(ts(1)),
        ..node("degraded", Some("nodegate.dev/degraded"), 1)
    };
    // (settings, node, leader live, status of the one line)
    let rows: [(&RunSettings, NodeSeen, Option<bool>, Status); 10] = [
        (&s, node("open", None, 1), Some(true), Status::Ok),
        (&s, node("young", init, 99_900), Some(true), Status::Ok),
        // 10m + the margin: not yet.
        (&s, node("due", init, 100_000 - 660), Some(true), Status::Ok),
        (
            &s,
            node("late", init, 100_000 - 661),
            Some(true),
            Status::Problem,
        ),
        (
            &s,
            node("young", init, 99_900),
            Some(false),
            Status::Problem,
        ),
        (&s, node("young", init, 99_900), None, Status::Ok),
        (&s, timed_out, Some(true), Status::Problem),
        (&s, suspended, Some(true), Status::Ok),
        // Re-gated with no --regate-timeout: no deadline.
        (&s, regated, Some(true), Status::Ok),
        (
            &scoped,
            node("outside", init, 99_999),
            Some(true),
            Status::Problem,
        ),
    ];
    for (s, n, live, want) in rows {
        let got = nodes::check(s, std::slice::from_ref(&n), live, now);
        assert_eq!(statuses(&got), [want], "{n:?} live {live:?}: {got:?}");
        if want == Status::Problem {
            assert_eq!(got[0].subject, format!("node {}", n.name));
            assert!(got[0].fix.is_some());
        }
    }
}

#[test]
fn many_stuck_nodes_are_named_up_to_a_limit() {
    let s = settings(&[]);
    let stuck: Vec<NodeSeen> = (0..25)
        .map(|i| node(&format!("n{i}"), Some("nodegate.dev/initializing"), 1))
        .collect();
    let got = nodes::check(&s, &stuck, Some(true), ts(100_000));
    assert_eq!(got.len(), nodes::MAX_NAMED + 1);
    assert!(got[nodes::MAX_NAMED].subject.contains("5 more"));
}

fn binding(startup: &str, managed: &str) -> Binding {
    Binding {
        name: "nodegate-startup-taint".to_string(),
        policy: "nodegate-startup-taint".to_string(),
        params_ref: Some("nodegate-system/nodegate-admission".to_string()),
        params: Some(Params {
            startup_rules: None,
            startup_taint: Some(startup.to_string()),
            managed_taints: Some(managed.to_string()),
            dry_run: None,
        }),
        ..Binding::default()
    }
}

#[test]
fn admission_policy_rows() {
    let s = settings(&[]);
    let two = settings(&["--taint", "a:NoSchedule", "--taint", "b:NoExecute"]);
    let scoped = settings(&["--node-selector", "pool=a"]);
    let init = "nodegate.dev/initializing:NoSchedule";
    let missing = Binding {
        params: None,
        ..binding(init, init)
    };
    let selecting = Binding {
        object_selector: nodegate_core::rules::selector::LabelSelector::parse("pool=a")
            .unwrap_or_default(),
        ..binding(init, init)
    };
    let rows: [(&RunSettings, Binding, Status); 7] = [
        (&s, binding(init, init), Status::Ok),
        (
            &s,
            binding(" nodegate.dev/initializing:NoSchedule", init),
            Status::Ok,
        ),
        (
            &s,
            binding("readiness.k8s.io/x:NoSchedule", init),
            Status::Problem,
        ),
        (
            &two,
            binding("a:NoSchedule", "b:NoExecute, a:NoSchedule"),
            Status::Ok,
        ),
        (
            &two,
            binding("a:NoSchedule", "a:NoSchedule"),
            Status::Problem,
        ),
        (&s, missing, Status::Problem),
        (&scoped, selecting.clone(), Status::Ok),
    ];
    for (s, b, want) in rows {
        let c = admission::binding(s, &b);
        assert_eq!(c.status, want, "{b:?}: {c:?}");
    }
    // A trial writes no parameters: their absence is as it should be, and
    // parameters without dryRun (another writer's) are a problem.
    let trial = settings(&["--dry-run", "--admission-params", "nodegate-admission"]);
    let c = admission::binding(
        &trial,
        &Binding {
            params: None,
            ..binding(init, init)
        },
    );
    assert_eq!(c.status, Status::Ok, "{c:?}");
    let c = admission::binding(&trial, &binding(init, init));
    assert_eq!(c.status, Status::Problem, "{c:?}");
    // The same binding against nodegate without --node-selector: a mismatch.
    let c = admission::binding(&s, &selecting);
    assert_eq!(c.status, Status::Problem, "{c:?}");
    assert!(c.fix.is_some_and(|f| f.contains("objectSelector")));
}

#[test]
fn admission_installation_rows() {
    let s = settings(&[]);
    let init = "nodegate.dev/initializing:NoSchedule";
    let policy = || vec!["nodegate-startup-taint".to_string()];
    let hook = |ca: bool, ready: Option<usize>| Webhook {
        configuration: "nodegate".to_string(),
        service: Some("nodegate-system/nodegate-webhook".to_string()),
        url: None,
        ca_bundle: ca,
        ready_endpoints: ready,
    };
    let rows: [(Admission, Vec<Status>); 7] = [
        (Admission::default(), vec![Status::Problem]),
        (
            Admission {
                policies: policy(),
                bindings: vec![binding(init, init)],
                ..Admission::default()
            },
            vec![Status::Ok],
        ),
        (
            Admission {
                policies: policy(),
                ..Admission::default()
            },
            vec![Status::Problem],
        ),
        (
            Admission {
                webhooks: vec![hook(true, Some(2))],
                ..Admission::default()
            },
            vec![Status::Ok],
        ),
        (
            Admission {
                webhooks: vec![hook(true, Some(0))],
                ..Admission::default()
            },
            vec![Status::Problem],
        ),
        (
            Admission {
                webhooks: vec![hook(true, None)],
                ..Admission::default()
            },
            vec![Status::Problem],
        ),
        (
            Admission {
                webhooks: vec![hook(false, Some(2))],
                ..Admission::default()
            },
            vec![Status::Problem],
        ),
    ];
    for (a, want) in rows {
        assert_eq!(statuses(&admission::check(&s, &a)), want, "{a:?}");
    }
}

#[test]
fn rbac_asks_for_what_nodegate_does_and_names_what_is_denied() {
    let s = settings(&["--leader-elect", "--lease-name", "ng"]);
    let wanted = rbac::required(&s, "ops");
    let described: Vec<String> = wanted.iter().map(Access::describe).collect();
    for w in [
        "patch nodes",
        "watch pods",
        "list daemonsets.apps",
        "create events.events.k8s.io in default",
        "update leases.coordination.k8s.io ng in ops",
    ] {
        assert!(described.iter().any(|d| d == w), "{w} not in {described:?}");
    }
    let no_lease = rbac::required(&settings(&[]), "ops");
    assert!(no_lease.iter().all(|a| a.resource != "leases"));
    assert!(no_lease.iter().all(|a| a.resource != "resourceslices"));
    let mut dra = settings(&[]);
    dra.gate.dra_drivers = vec![nodegate_core::rules::devices::DraDriver {
        driver: "gpu.nvidia.com".into(),
        node_selector: None,
    }];
    let described: Vec<String> = rbac::required(&dra, "ops")
        .iter()
        .map(Access::describe)
        .collect();
    for w in [
        "list resourceslices.resource.k8s.io",
        "watch resourceslices.resource.k8s.io",
    ] {
        assert!(described.iter().any(|d| d == w), "{w} not in {described:?}");
    }
    assert!(no_lease.iter().all(|a| a.resource != "secrets"));
    // Each optional feature asks for its own rights, and only when on.
    assert!(no_lease.iter().all(|a| a.subresource.is_none()
        && a.resource != "nodeclaims"
        && a.resource != "machines"
        && a.namespace.is_none()
        || a.resource == "events"));
    let features = settings(&["--node-condition", "--on-timeout=replace"]);
    let described: Vec<String> = rbac::required(&features, "ops")
        .iter()
        .map(Access::describe)
        .collect();
    for w in [
        "patch nodes/status",
        "list nodeclaims.karpenter.sh",
        "delete nodeclaims.karpenter.sh",
        "delete machines.cluster.x-k8s.io",
    ] {
        assert!(described.iter().any(|d| d == w), "{w} not in {described:?}");
    }
    let hook = settings(&[
        "--webhook-addr=127.0.0.1:9443",
        "--webhook-cert-secret=ng/tls",
        "--webhook-configuration=ngw",
        "--webhook-host=ngw.ng.svc",
    ]);
    let described: Vec<String> = rbac::required(&hook, "ng")
        .iter()
        .map(Access::describe)
        .collect();
    for w in [
        "update secrets tls in ng",
        "patch mutatingwebhookconfigurations.admissionregistration.k8s.io ngw",
    ] {
        assert!(described.iter().any(|d| d == w), "{w} not in {described:?}");
    }

    let all_allowed: Vec<(Access, bool)> = wanted.iter().cloned().map(|a| (a, true)).collect();
    let one_denied: Vec<(Access, bool)> = wanted
        .iter()
        .cloned()
        .map(|a| {
            let allowed = a.verb != "patch";
            (a, allowed)
        })
        .collect();
    let ok = rbac::check("nodegate-system/nodegate", Some(&all_allowed));
    assert_eq!(statuses(&ok), [Status::Ok]);
    let bad = rbac::check("nodegate-system/nodegate", Some(&one_denied));
    assert_eq!(statuses(&bad), [Status::Problem]);
    assert!(bad[0].message.contains("patch nodes"), "{bad:?}");
    let unknown = rbac::check("nodegate-system/nodegate", None);
    assert_eq!(statuses(&unknown), [Status::Skipped]);
    assert!(unknown[0].message.contains("not checked"));
}

#[test]
fn the_admission_probe_passes_only_when_a_managed_taint_came_back() {
    let s = settings(&["--taint", "a:NoSchedule", "--taint", "b:NoExecute"]);
    let came = |t: &[&str]| Ok(t.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    let rows: [(Result<Vec<String>, String>, Status); 5] = [
        (came(&["a:NoSchedule"]), Status::Ok),
        (came(&["x:NoSchedule", "b:NoExecute"]), Status::Ok),
        (came(&[]), Status::Problem),
        (came(&["a:NoExecute"]), Status::Problem),
        (Err("may not create nodes".to_string()), Status::Skipped),
    ];
    for (probe, want) in rows {
        let c = admission::answered(&s, &probe);
        assert_eq!(c.status, want, "{probe:?}: {c:?}");
    }
    // Probed only when something is installed: with nothing, one line.
    let none = Admission {
        probe: Some(came(&[])),
        ..Admission::default()
    };
    assert_eq!(statuses(&admission::check(&s, &none)), [Status::Problem]);
    let hooked = Admission {
        webhooks: vec![Webhook {
            configuration: "nodegate".to_string(),
            ca_bundle: true,
            url: Some("https://x".to_string()),
            ..Webhook::default()
        }],
        probe: Some(came(&[])),
        ..Admission::default()
    };
    assert_eq!(
        statuses(&admission::check(&s, &hooked)),
        [Status::Ok, Status::Problem]
    );
}

#[test]
fn karpenter_before_1_13_does_not_ignore_a_readiness_key() {
    let readiness = settings(&["--taint", "readiness.k8s.io/nodegate:NoSchedule"]);
    let dep = |image: &str| -> k8s_openapi::api::apps::v1::Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "karpenter", "namespace": "kube-system"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "controller", "image": image},
            ]}}},
        }))
        .unwrap_or_default()
    };
    let v = |image: &str| karpenter::version(&[dep(image)]);
    assert_eq!(
        v("public.ecr.aws/karpenter/controller:1.14.3@sha256:ab").map(|x| x.0),
        Some((1, 14))
    );
    assert_eq!(
        v("public.ecr.aws/karpenter/controller:v0.37.0").map(|x| x.0),
        Some((0, 37))
    );
    assert_eq!(v("mcr.microsoft.com/aks/karpenter/karpenter:v1.4.0"), None);
    assert_eq!(v("localhost:5000/karpenter/controller"), None);
    // (image, NodePool startupTaints, status)
    let listed = [("readiness.k8s.io/nodegate", "NoSchedule")];
    type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], Status);
    let rows: [Row; 4] = [
        (
            "public.ecr.aws/karpenter/controller:1.12.1",
            &[],
            Status::Problem,
        ),
        (
            "public.ecr.aws/karpenter/controller:1.12.1",
            &listed,
            Status::Ok,
        ),
        (
            "public.ecr.aws/karpenter/controller:1.13.0",
            &[],
            Status::Ok,
        ),
        (
            "mcr.microsoft.com/aks/karpenter/karpenter:v1.4.0",
            &[],
            Status::Ok,
        ),
    ];
    for (image, startup, want) in rows {
        let c = karpenter::nodepool(&readiness.gate, &pool("p", startup), v(image).as_ref());
        assert_eq!(c.status, want, "{image} {startup:?}: {c:?}");
    }
}

/// Under the default presets (`--autoscaler auto`) a NodePool needs no
/// setting, and the policy's parameters must carry the same rules.
#[test]
fn the_default_presets_need_no_nodepool_setting_and_rules_in_the_parameters() {
    let auto = settings(&["--autoscaler", "auto"]);
    let c = karpenter::nodepool(&auto.gate, &pool("default", &[]), None);
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(c.message.contains("readiness.k8s.io/nodegate"), "{c:?}");

    let managed = "nodegate.dev/initializing:NoSchedule,readiness.k8s.io/nodegate:NoSchedule,\
                   startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule";
    let with_rules = |rules: Option<&str>| Binding {
        params: Some(Params {
            startup_rules: rules.map(str::to_string),
            startup_taint: Some("nodegate.dev/initializing:NoSchedule".to_string()),
            managed_taints: Some(managed.to_string()),
            dry_run: None,
        }),
        ..binding("", "")
    };
    let rules = auto.gate.startup.admission_rules();
    let c = admission::binding(&auto, &with_rules(Some(&rules)));
    assert_eq!(c.status, Status::Ok, "{c:?}");
    // Rules left out of the parameters: the policy adds the default taint
    // where nodegate's own entrances add a preset's.
    let c = admission::binding(&auto, &with_rules(None));
    assert_eq!(c.status, Status::Problem, "{c:?}");
    assert!(
        c.fix.as_ref().is_some_and(|f| f.contains("startupRules")),
        "{c:?}"
    );
    let c = admission::binding(
        &auto,
        &with_rules(Some("karpenter.sh/nodepool=x:NoSchedule\n")),
    );
    assert_eq!(c.status, Status::Problem, "{c:?}");
}

/// A trial run (`--dry-run`) while the policy's parameters are live taints
/// every new node and never opens it: a problem; the other way round, a
/// live nodegate whose policy is in dry-run taints nothing: a problem too.
#[test]
fn the_policy_parameters_must_match_dry_run() {
    let managed = "nodegate.dev/initializing:NoSchedule";
    let with = |dry_run: Option<&str>| {
        let mut b = binding("nodegate.dev/initializing:NoSchedule", managed);
        if let Some(p) = b.params.as_mut() {
            p.dry_run = dry_run.map(str::to_string);
        }
        b
    };
    let live = settings(&[]);
    let trial = settings(&["--dry-run"]);
    for params in [None, Some("false")] {
        let c = admission::binding(&trial, &with(params));
        assert_eq!(c.status, Status::Problem, "{params:?}: {c:?}");
        assert!(
            c.message.contains("--dry-run")
                && c.message.contains("nodegate-system/nodegate-admission"),
            "{c:?}"
        );
    }
    assert_eq!(
        admission::binding(&trial, &with(Some("true"))).status,
        Status::Ok
    );
    let c = admission::binding(&live, &with(Some("true")));
    assert_eq!(c.status, Status::Problem, "{c:?}");
    assert!(c.message.contains("runs live"), "{c:?}");
    assert_eq!(
        admission::binding(&live, &with(Some("false"))).status,
        Status::Ok
    );
}
