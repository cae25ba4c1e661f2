//! Table tests of every check's decision: each row is what the cluster
//! shows and nodegate's flags, and what the check must say.

use std::time::Duration;

use clap::Parser;
use jiff::Timestamp;
use nodegate_core::model::{Labels, Taint};
use nodegate_core::placement::ManagedTaint;

use super::admission::{self, Admission, Binding, Params, Webhook};
use super::autoscaler::{self, Autoscaler, flags};
use super::karpenter::{self, NodePool};
use super::leader::{self, LeaseSeen};
use super::nodes::{self, NodeSeen};
use super::rbac::{self, Access};
use crate::commands::doctor::report::{Check, Status};
use crate::settings::cli::{Cli, Command};
use crate::settings::config::{RunSettings, run_settings};

/// `nodegate run` with these flags. Without an `--autoscaler`, as with
/// `--autoscaler none`: every node gets the first `--taint` (the rows that
/// check the presets say so themselves).
fn settings(flags: &[&str]) -> RunSettings {
    let none = ["--autoscaler", "none"];
    let extra: &[&str] = if flags.contains(&"--autoscaler") {
        &[]
    } else {
        &none
    };
    let argv = ["nodegate", "run"]
        .iter()
        .chain(flags.iter())
        .chain(extra.iter())
        .copied();
    let args = match Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(Command::Run(a)) => *a,
        other => panic!("{flags:?} do not parse as run: {other:?}"),
    };
    run_settings(&args).unwrap_or_else(|e| panic!("{flags:?}: {e}"))
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn statuses(checks: &[Check]) -> Vec<Status> {
    checks.iter().map(|c| c.status).collect()
}

fn pool(name: &str, startup: &[(&str, &str)]) -> NodePool {
    NodePool::from_json(
        name,
        &serde_json::json!({"spec": {"template": {"spec": {"startupTaints":
            startup.iter().map(|(k, e)| serde_json::json!({"key": k, "effect": e})).collect::<Vec<_>>()
        }}}}),
    )
}

#[test]
fn karpenter_recognises_a_readiness_key_or_a_listed_one_and_nothing_else() {
    let default = settings(&[]);
    let readiness = settings(&["--taint", "readiness.k8s.io/nodegate:NoSchedule"]);
    let scoped = settings(&["--node-selector", "pool=gpu"]);
    let listed = [("nodegate.dev/initializing", "NoSchedule")];
    let wrong_effect = [("nodegate.dev/initializing", "NoExecute")];
    // (settings, NodePool, status, a word the line must carry)
    let rows: [(&RunSettings, NodePool, Status, &str); 6] = [
        (
            &default,
            pool("default", &[]),
            Status::Problem,
            "extra NodeClaims",
        ),
        (
            &default,
            pool("listed", &listed),
            Status::Ok,
            "karpenter.sh/registered=true",
        ),
        (
            &default,
            pool("effect", &wrong_effect),
            Status::Problem,
            "startupTaints",
        ),
        (&readiness, pool("ready", &[]), Status::Ok, "1.13"),
        (&scoped, pool("outside", &[]), Status::Ok, "--node-selector"),
        (&default, NodePool::default(), Status::Problem, "NodePool"),
    ];
    for (s, p, want, word) in rows {
        let c = karpenter::nodepool(&s.gate, &p, None);
        assert_eq!(c.status, want, "{p:?}: {c:?}");
        let text = format!("{} {} {:?} {:?}", c.subject, c.message, c.fix, c.note);
        assert!(text.contains(word), "{p:?}: {word:?} not in {text}");
    }
    // The problem names the NodePool and the field to set.
    let c = karpenter::nodepool(&default.gate, &pool("web", &[]), None);
    assert_eq!(c.subject, "NodePool web");
    let fix = c.fix.unwrap_or_default();
    assert!(
        fix.contains("{key: nodegate.dev/initializing, effect: NoSchedule}")
            && fix.contains("spec.template.spec.startupTaints")
            && fix.contains("--taint=readiness.k8s.io/nodegate:NoSchedule"),
        "{fix}"
    );
}

#[test]
fn karpenter_absent_or_without_nodepools_is_not_a_problem() {
    let s = settings(&[]);
    assert_eq!(
        statuses(&karpenter::check(&s.gate, None, None)),
        [Status::Skipped]
    );
    assert!(
        karpenter::check(&s.gate, None, None)[0]
            .message
            .contains("not installed")
    );
    assert_eq!(
        statuses(&karpenter::check(&s.gate, Some(&[]), None)),
        [Status::Skipped]
    );
}

#[test]
fn a_nodepool_is_read_with_its_template_labels_and_startup_taints() {
    let p = NodePool::from_json(
        "gpu",
        &serde_json::json!({"spec": {"template": {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {"startupTaints": [{"key": "a", "effect": "NoSchedule"}, {"value": "no key"}]},
        }}}),
    );
    assert_eq!(
        p.labels,
        labels(&[("team", "ml"), ("karpenter.sh/nodepool", "gpu")])
    );
    assert_eq!(
        p.startup_taints,
        [("a".to_string(), "NoSchedule".to_string())]
    );
}

#[test]
fn autoscaler_flags_are_read_as_the_autoscaler_reads_them() {
    let f = flags(&words(
        "./cluster-autoscaler --v=4 --startup-taint=a --startup-taint b -ignore-taint=c \
         --startup-taint-prefix=readiness.k8s.io/ --max-node-startup-time 20m --startup-taint",
    ));
    assert_eq!(f.startup_taints, ["a", "b", "c"]);
    assert_eq!(f.prefixes, ["readiness.k8s.io/"]);
    assert_eq!(f.max_node_startup_time.as_deref(), Some("20m"));
    // Coverage: a named key, a flag prefix, the built-in prefixes, and no more.
    for (key, covered) in [
        ("a", true),
        ("c", true),
        ("readiness.k8s.io/nodegate", true),
        (
            "startup-taint.cluster-autoscaler.kubernetes.io/nodegate",
            true,
        ),
        ("ignore-taint.cluster-autoscaler.kubernetes.io/x", true),
        ("status-taint.cluster-autoscaler.kubernetes.io/x", false),
        ("nodegate.dev/initializing", false),
        ("ab", false),
    ] {
        assert_eq!(f.covers(key), covered, "{key}");
    }
}

#[test]
fn an_autoscaler_is_found_by_its_program_not_by_a_flag_naming_it() {
    let found = |w: &str| Autoscaler::from_container("kube-system", "ca", Some(0), &words(w));
    assert!(found("/cluster-autoscaler --cloud-provider=clusterapi").is_some());
    assert!(found("./cluster-autoscaler").is_some());
    assert!(
        Autoscaler::from_container(
            "ns",
            "x",
            None,
            &[
                "sh".into(),
                "-c".into(),
                "exec /bin/cluster-autoscaler --v=2".into()
            ]
        )
        .is_some()
    );
    // nodegate itself, with the autoscaler's prefix in its flags.
    assert!(found("run --taint=startup-taint.cluster-autoscaler.kubernetes.io/nodegate").is_none());
    assert!(found("cluster-autoscaler-operator --x").is_none());
}

#[test]
fn autoscaler_startup_taint_rows() {
    let default = ManagedTaint::new("nodegate.dev/initializing", "NoSchedule");
    let prefixed = ManagedTaint::new(
        "startup-taint.cluster-autoscaler.kubernetes.io/nodegate",
        "NoSchedule",
    );
    // (args, taints nodegate adds, status)
    let rows: [(&str, Vec<ManagedTaint>, Status); 6] = [
        ("cluster-autoscaler", vec![default.clone()], Status::Problem),
        (
            "cluster-autoscaler --startup-taint=nodegate.dev/initializing",
            vec![default.clone()],
            Status::Ok,
        ),
        (
            "cluster-autoscaler --startup-taint-prefix=nodegate.dev/",
            vec![default.clone()],
            Status::Ok,
        ),
        ("cluster-autoscaler", vec![prefixed.clone()], Status::Ok),
        (
            "cluster-autoscaler --startup-taint=nodegate.dev/initializing",
            vec![
                default.clone(),
                ManagedTaint::new("readiness.k8s.io/x", "NoSchedule"),
            ],
            Status::Problem,
        ),
        ("cluster-autoscaler", vec![], Status::Ok),
    ];
    for (args, taints, want) in rows {
        let a = Autoscaler::from_container("kube-system", "ca", Some(1), &words(args))
            .unwrap_or_else(|| panic!("{args}: not an autoscaler"));
        let c = autoscaler::startup_taints(&a, &flags(&a.words), &taints);
        assert_eq!(c.status, want, "{args} {taints:?}: {c:?}");
    }
    // The problem names the Deployment, its replicas 0 and the flag to add.
    let a = Autoscaler::from_container(
        "kube-system",
        "cluster-autoscaler",
        Some(0),
        &words("cluster-autoscaler --startup-taint=nodegate.dev/initializing:NoSchedule"),
    )
    .expect("an autoscaler");
    let got = autoscaler::check(&settings(&[]), &[default], std::slice::from_ref(&a));
    let c = &got[0];
    assert_eq!(c.subject, "Deployment kube-system/cluster-autoscaler");
    assert!(
        c.note.as_deref().is_some_and(|n| n.contains("replicas 0")),
        "{c:?}"
    );
    let fix = c.fix.clone().unwrap_or_default();
    assert!(
        fix.contains("--startup-taint=nodegate.dev/initializing "),
        "{fix}"
    );
    assert!(
        fix.contains("takes a key"),
        "a KEY:EFFECT value is named: {fix}"
    );
}

#[test]
fn autoscaler_deadline_rows() {
    // (nodegate's flags, the autoscaler's args, status)
    let rows: [(&[&str], &str, Status); 8] = [
        (&[], "cluster-autoscaler", Status::Ok),
        (
            &["--timeout", "10m"],
            "cluster-autoscaler --max-node-startup-time=5m",
            Status::Problem,
        ),
        (&["--timeout", "15m"], "cluster-autoscaler", Status::Problem),
        (&["--timeout", "14m"], "cluster-autoscaler", Status::Ok),
        (&["--timeout", "0"], "cluster-autoscaler", Status::Problem),
        (
            &["--timeout", "10m"],
            "cluster-autoscaler --max-node-startup-time 1h",
            Status::Ok,
        ),
        (
            &[
                "--timeout",
                "5m",
                "--regate-after",
                "1m",
                "--regate-timeout",
                "20m",
            ],
            "cluster-autoscaler",
            Status::Problem,
        ),
        (
            &["--timeout", "5m"],
            "cluster-autoscaler --max-node-startup-time=soon",
            Status::Skipped,
        ),
    ];
    for (ours, theirs, want) in rows {
        let s = settings(ours);
        let a = Autoscaler::from_container("ns", "ca", None, &words(theirs)).expect("autoscaler");
        let c = autoscaler::deadline(&s, &a, &flags(&a.words));
        assert_eq!(c.status, want, "{ours:?} vs {theirs}: {c:?}");
    }
    let s = settings(&["--timeout", "10m"]);
    let a = Autoscaler::from_container(
        "ns",
        "ca",
        None,
        &words("cluster-autoscaler --max-node-startup-time=5m"),
    )
    .expect("autoscaler");
    let c = autoscaler::deadline(&s, &a, &flags(&a.words));
    assert!(
        c.message.contains("5m") && c.message.contains("--timeout 10m"),
        "{c:?}"
    );
    assert!(
        c.fix
            .is_some_and(|f| f.contains("--timeout") && f.contains("--max-node-startup-time"))
    );
}

#[test]
fn no_autoscaler_is_not_a_problem() {
    let s = settings(&[]);
    assert_eq!(
        statuses(&autoscaler::check(&s, &[], &[])),
        [Status::Skipped]
    );
}

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
        object_selector: nodegate_core::selector::LabelSelector::parse("pool=a")
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
    assert!(no_lease.iter().all(|a| a.resource != "secrets"));
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
