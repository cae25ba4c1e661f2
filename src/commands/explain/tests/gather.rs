use super::*;
use nodegate_core::gate::report::describe_waiting;
use nodegate_core::rules::readiness::Waiting;

#[test]
fn pod_detail_reads_the_scheduler_message_and_container_reasons() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": "0/3 nodes are available: 1 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found."}],
            "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                                       "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
            "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}},
                {"name": "b", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}},
                {"name": "c", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}}],
        },
    }))
    .unwrap();
    let d = pod_detail(&p);
    assert_eq!(
        d.unschedulable.as_deref(),
        Some("0/3 nodes are available: 1 Insufficient cpu.")
    );
    assert_eq!(
        d.containers,
        vec![
            "container init: Error, exit code 1".to_string(),
            "container a: ImagePullBackOff: Back-off pulling image \"x\"".to_string(),
            "container c: running but not Ready".to_string(),
        ]
    );
    let scheduled: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
    }))
    .unwrap();
    assert_eq!(pod_detail(&scheduled), PodDetail::default());
}

#[test]
fn describe_waiting_adds_what_the_pod_says() {
    // The gate words what a member waits for as the readiness module does;
    // the report adds what the full pod says, by the pod's own state.
    let w = Waiting::NotRunning {
        pod: "p".into(),
        phase: "Pending".into(),
    };
    let mut pending = mk_pod("p", "n", "u");
    pending.phase = "Pending".into();
    pending.ready = false;
    let unsched = PodDetail {
        unschedulable: Some("no room".into()),
        containers: vec![],
    };
    assert_eq!(
        describe_waiting(&w.to_string(), Some(&pending), Some(&unsched)),
        "pod p is Pending, not scheduled: no room"
    );
    assert_eq!(
        describe_waiting(&w.to_string(), Some(&pending), None),
        "pod p is Pending"
    );
    let t = Waiting::Terminating { pod: "p".into() };
    let mut going = mk_pod("p", "n", "u");
    going.terminating = true;
    let busy = PodDetail {
        unschedulable: None,
        containers: vec!["container c: Error".into()],
    };
    assert_eq!(
        describe_waiting(&t.to_string(), Some(&going), Some(&busy)),
        "pod p is terminating"
    );
}

#[test]
fn long_kubelet_messages_are_shortened() {
    let long = "x".repeat(500);
    let s = shorten(&long);
    assert_eq!(s.chars().count(), MESSAGE_LIMIT + 3);
    assert!(s.ends_with("..."));
    assert_eq!(shorten(" short "), "short");
}

#[test]
fn keep_details_files_each_detail_under_its_pod_and_keeps_the_order() {
    let mut details = BTreeMap::new();
    let busy = PodDetail {
        unschedulable: None,
        containers: vec!["container c: Error".into()],
    };
    let pods = keep_details(
        vec![
            (mk_pod("b", "n", "u-b"), busy.clone()),
            (mk_pod("a", "n", "u-a"), PodDetail::default()),
        ],
        &mut details,
    );
    let names: Vec<&str> = pods.iter().map(|p| &*p.name).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(details.len(), 2);
    assert_eq!(details.get(&pods[0].key()), Some(&busy));
    assert_eq!(details.get(&pods[1].key()), Some(&PodDetail::default()));
}
