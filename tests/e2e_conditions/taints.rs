//! Condition-rule taints: out-of-service on a preempted spot node, the real
//! taint-eviction controller acting on it, a foreign taint surviving, and
//! the two removal policies.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::support::gate::NS;
use super::support::{fake_node, metric, wait_for};
use super::{Shared, explain_json, metrics, set_condition};

const OOS: &str = "node.kubernetes.io/out-of-service";
const KAPUT: &str = "example.com/kaput";
const FOREIGN: &str = "example.com/foreign";
const FOREIGN_2: &str = "example.com/foreign-2";

fn taints(n: &Node) -> Vec<Taint> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn find(n: &Node, key: &str) -> Option<Taint> {
    taints(n).into_iter().find(|t| t.key == key)
}

async fn wait_taint(s: &Shared, node: &str, key: &str, present: bool) -> Node {
    let what = format!("taint {key} on {node} present={present}");
    let within = Duration::from_secs(20);
    let found = tokio::time::timeout(within, async {
        loop {
            let n = s.env.node(node).await;
            if find(&n, key).is_some() == present {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{what}: not within {within:?}\n{}", s.ng.logs()))
}

/// Appends a taint as a careful agent does: a JSON patch conditional on the
/// version it read, again on a conflict.
async fn add_foreign_taint(s: &Shared, key: &str) {
    let t = json!({"key": key, "effect": "NoSchedule"});
    for _ in 0..20 {
        let n = s.env.node("spot-1").await;
        let rv = n.metadata.resource_version.clone().unwrap_or_default();
        let add = if taints(&n).is_empty() {
            json!({"op": "add", "path": "/spec/taints", "value": [t]})
        } else {
            json!({"op": "add", "path": "/spec/taints/-", "value": t})
        };
        let ops = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, add]);
        let patch: json_patch::Patch = serde_json::from_value(ops).expect("patch");
        match s
            .env
            .nodes
            .patch("spot-1", &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => continue,
            Err(e) => panic!("add the foreign taint: {e}"),
        }
    }
    panic!("could not add the foreign taint in 20 attempts");
}

/// The race a blind write loses, forced: nodegate's patches built from a
/// view of the node read *before* another agent changed its taints are
/// refused by the real API server, and the other agent's taint survives.
async fn stale_writes_are_refused(s: &Shared) {
    use nodegate::cluster::patch::taint_write;
    use nodegate::cluster::writer::outcome;
    use nodegate_core::deciders::{Origin, TaintChange, TaintWrite};
    use nodegate_core::gate::PatchOutcome;
    let before = s.env.node("spot-1").await;
    let (stale, _) = nodegate::cluster::project::node(&before);
    let stale = stale.expect("projected node");
    add_foreign_taint(s, FOREIGN).await;
    let ours = nodegate_core::vocab::model::Taint::new(OOS, "nodeshutdown", "NoExecute");
    let refused = |r: Result<Node, kube::Error>| match r {
        Err(kube::Error::Api(e)) => e.code == 409 || e.code == 422,
        _ => false,
    };
    let write = |change| TaintWrite {
        origin: Origin::Rules,
        node: stale.name.clone(),
        uid: stale.uid.clone(),
        resource_version: stale.resource_version.clone(),
        change,
        tag: None,
    };
    let add = taint_write(&write(TaintChange::Add {
        taint: ours.clone(),
        existing: stale.taints.len(),
        annotations: Vec::new(),
        annotations_present: stale.annotations_present,
        at: jiff::Timestamp::now(),
    }));
    let r = s
        .env
        .nodes
        .patch("spot-1", &PatchParams::default(), &Patch::Json::<()>(add))
        .await;
    // Hardening: the writer tells the API server's answer to a
    // failed `test` op (the node changed: decide again) ...
    let told = outcome(match &r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(kube::Error::Api(e.clone())),
        Err(e) => panic!("{e}"),
    });
    assert_eq!(told, PatchOutcome::Conflict, "{r:?}");
    assert!(refused(r), "an add built from a stale view was not refused");
    // ... from its refusal of an invalid taint (no use trying again); tried
    // again while the node moves on under the patch (kwok, nodegate).
    let mut told = PatchOutcome::Conflict;
    for _ in 0..10 {
        let fresh = nodegate::cluster::project::node(&s.env.node("spot-1").await)
            .0
            .expect("projected node");
        let bad = nodegate_core::vocab::model::Taint::new(
            "example.com/invalid",
            "not valid",
            "NoSchedule",
        );
        let invalid = taint_write(&TaintWrite {
            resource_version: fresh.resource_version.clone(),
            ..write(TaintChange::Add {
                taint: bad,
                existing: fresh.taints.len(),
                annotations: Vec::new(),
                annotations_present: fresh.annotations_present,
                at: jiff::Timestamp::now(),
            })
        });
        let r = s
            .env
            .nodes
            .patch(
                "spot-1",
                &PatchParams::default(),
                &Patch::Json::<()>(invalid),
            )
            .await
            .map(|_| ());
        told = outcome(r);
        if told != PatchOutcome::Conflict {
            break;
        }
    }
    assert!(
        matches!(&told, PatchOutcome::Failed(e) if e.contains("not valid")),
        "an invalid taint must be a failure, not a conflict: {told:?}"
    );
    // And a removal from a stale view: the taint at index 0 then was ours
    // (as the stale view says), now it is the foreign one's place.
    let remove = taint_write(&write(TaintChange::Remove {
        index: 0,
        taint: ours.clone(),
        annotations: Vec::new(),
    }));
    let r = s
        .env
        .nodes
        .patch(
            "spot-1",
            &PatchParams::default(),
            &Patch::Json::<()>(remove),
        )
        .await;
    assert!(
        refused(r),
        "a removal built from a stale view was not refused"
    );
    // (The node lifecycle controller may be lifting its not-ready taint
    // meanwhile: only ours and the foreign one are checked.)
    let n = s.env.node("spot-1").await;
    assert!(
        find(&n, FOREIGN).is_some() && find(&n, OOS).is_none(),
        "the foreign taint must survive and ours must not be there: {:?}",
        taints(&n)
    );
}

/// (b) and (c) on one spot node.
pub async fn preempted_spot_node(s: &Shared) {
    let nodes = &s.env.nodes;
    s.env
        .cluster
        .create_node(&fake_node("spot-1", &[("scenario", "spot")], &[]))
        .await;
    // A workload pod without a toleration for out-of-service, bound to the
    // node directly.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "workload", "namespace": NS},
        "spec": {"nodeName": "spot-1",
                 "containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
    }))
    .expect("pod manifest");
    s.env
        .pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create the workload pod");
    wait_for("the workload to run", Duration::from_secs(30), || async {
        let p = s
            .env
            .pods
            .get("workload")
            .await
            .map_err(|e| e.to_string())?;
        match p.status.and_then(|st| st.phase).as_deref() {
            Some("Running") => Ok(()),
            other => Err(format!("phase {other:?}")),
        }
    })
    .await;
    stale_writes_are_refused(s).await;

    // A status that only contains the pattern does not match it: the regex
    // is anchored, so NotKaput puts no taint on.
    set_condition(nodes, "spot-1", "Disk", "NotKaput").await;

    // The node is preempted; at the same moment another agent adds a taint
    // of its own, a plain JSON patch appending to the list.
    set_condition(nodes, "spot-1", "Preempted", "True").await;
    add_foreign_taint(s, FOREIGN_2).await;

    let n = wait_taint(s, "spot-1", OOS, true).await;
    let oos = find(&n, OOS).expect("out-of-service taint");
    assert_eq!(oos.effect, "NoExecute");
    assert_eq!(oos.value.as_deref(), Some("nodeshutdown"));
    assert!(
        oos.time_added.is_some(),
        "NoExecute without timeAdded: {oos:?}"
    );
    assert!(
        find(&n, FOREIGN).is_some() && find(&n, FOREIGN_2).is_some(),
        "a foreign taint was lost: {:?}",
        taints(&n)
    );
    assert!(find(&n, KAPUT).is_none(), "Disk=NotKaput matched Kaput");

    // explain shows each rule's verdict for the node.
    let r = explain_json(s, "spot-1").await;
    let rules = r["condition_taints"].as_array().expect("condition_taints");
    let verdict = |name: &str| {
        rules
            .iter()
            .find(|v| v["rule"] == name)
            .unwrap_or_else(|| panic!("no rule {name} in {r}"))
    };
    assert_eq!(verdict("preempted")["matches"], true, "{r}");
    assert_eq!(verdict("preempted")["tainted"], true, "{r}");
    assert_eq!(verdict("kaput")["matches"], false, "{r}");
    assert!(
        verdict("kaput")["why"]
            .as_str()
            .is_some_and(|w| w.contains("Disk=NotKaput does not match")),
        "{r}"
    );

    // The real taint-eviction controller evicts the pod.
    wait_for(
        "the workload to be evicted",
        Duration::from_secs(60),
        || async {
            match s.env.pods.get_opt("workload").await {
                Ok(None) => Ok(()),
                Ok(Some(p)) if p.metadata.deletion_timestamp.is_some() => Ok(()),
                Ok(Some(p)) => Err(format!("still there: {:?}", p.status.and_then(|s| s.phase))),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;

    // A remove: never rule's taint.
    set_condition(nodes, "spot-1", "Disk", "Kaput").await;
    wait_taint(s, "spot-1", KAPUT, true).await;

    // (c) Both conditions clear: whenCleared takes its taint off, never
    // keeps its own; the foreign taint is untouched throughout.
    set_condition(nodes, "spot-1", "Preempted", "False").await;
    set_condition(nodes, "spot-1", "Disk", "Fine").await;
    let n = wait_taint(s, "spot-1", OOS, false).await;
    // The same pass that took out-of-service off judged the kaput rule.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n2 = s.env.node("spot-1").await;
    assert!(
        find(&n2, KAPUT).is_some(),
        "remove: never came off: {:?}",
        taints(&n2)
    );
    for t in [FOREIGN, FOREIGN_2] {
        assert!(find(&n, t).is_some() && find(&n2, t).is_some(), "{t} lost");
    }

    let reasons: Vec<String> = s
        .env
        .events_for("spot-1")
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for want in ["ConditionTaintAdded", "ConditionTaintRemoved"] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} Event: {reasons:?}"
        );
    }
    let text = metrics(&s.addr).await;
    for (series, want) in [
        (
            "nodegate_condition_taints_added_total{rule=\"preempted\"}",
            1.0,
        ),
        (
            "nodegate_condition_taints_removed_total{rule=\"preempted\"}",
            1.0,
        ),
        ("nodegate_condition_taints_added_total{rule=\"kaput\"}", 1.0),
        (
            "nodegate_condition_rule_matching_nodes{rule=\"kaput\"}",
            0.0,
        ),
    ] {
        assert_eq!(metric(&text, series), Some(want), "{series}\n{text}");
    }
}

/// Hardening: an operator follows the upstream non-graceful
/// shutdown runbook and puts out-of-service on a dead spot node by hand.
/// The node does not report `Preempted=True`, so the `preempted` rule
/// (`remove: whenCleared`) does not match it, and used to take the taint
/// off within a second. nodegate records the taints it puts on and removes
/// only those: the operator's stays. That nodegate has decided the node
/// with the taint on is seen from the `probe` rule's taint, put on in the
/// same look at the node; from then on a watch on the node must never see
/// the operator's taint go.
pub async fn out_of_service_by_hand(s: &Shared) {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::watcher;
    let oos = (
        "node.kubernetes.io/out-of-service",
        "nodeshutdown",
        "NoExecute",
    );
    s.env
        .cluster
        .create_node(&fake_node(
            "spot-2",
            &[("scenario", "spot-by-hand")],
            &[oos],
        ))
        .await;
    set_condition(&s.env.nodes, "spot-2", "Probe", "True").await;
    wait_taint(s, "spot-2", "example.com/probe", true).await;
    let cfg = watcher::Config::default().fields("metadata.name=spot-2");
    let mut events = watcher::watcher(s.env.nodes.clone(), cfg).boxed();
    let watched = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(ev)) = events.try_next().await {
            if let watcher::Event::Apply(n) | watcher::Event::InitApply(n) = ev {
                assert!(
                    find(&n, OOS).is_some(),
                    "nodegate took the operator's out-of-service taint off: {:?}\n{}",
                    taints(&n),
                    s.ng.logs()
                );
            }
        }
    })
    .await;
    assert!(watched.is_err(), "the watch on spot-2 ended early");
    let n = s.env.node("spot-2").await;
    assert!(find(&n, OOS).is_some(), "{:?}", taints(&n));
    assert_eq!(
        super::support::gate::annotation(&n, "nodegate.dev/condition-taints").as_deref(),
        Some("probe"),
        "nodegate records the taint it put on, and only that one"
    );
}
