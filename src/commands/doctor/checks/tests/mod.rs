//! Table tests of every check's decision: each row is what the cluster
//! shows and nodegate's flags, and what the check must say.

use std::time::Duration;

use clap::Parser;
use jiff::Timestamp;
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::vocab::model::{Labels, Taint};

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
        .map(|(k, v)| (k.to_string().into(), v.to_string().into()))
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

// The checks that read the cluster itself: its Lease, its nodes, the
// admission policy or webhook, RBAC; and the rows added for the presets.
mod cluster;
