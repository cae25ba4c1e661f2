use super::*;
use crate::settings::config::CanaryPod;
use k8s_openapi::api::core::v1::ResourceRequirements;

fn template() -> CanaryPod {
    CanaryPod {
        image: "registry.k8s.io/pause:3.10".into(),
        image_pull_policy: "IfNotPresent".into(),
        readiness_probe: None,
        resources: ResourceRequirements::default(),
        priority_class_name: None,
    }
}

#[test]
fn the_canary_is_bound_owned_by_its_node_tolerates_only_the_managed_taints_and_is_hardened() {
    let create = CanaryCreate {
        node: "n1".into(),
        node_uid: "u1".into(),
        name: "nodegate-canary-n1".into(),
        label: "n1".into(),
    };
    let tolerate = [ManagedTaint::new("nodegate.dev/initializing", "NoSchedule")];
    let pod = build(&create, "nodegate", &template(), &tolerate);
    let json = serde_json::to_value(&pod).unwrap();
    assert_eq!(json["metadata"]["namespace"], "nodegate");
    assert_eq!(json["metadata"]["labels"]["nodegate.dev/canary"], "n1");
    assert_eq!(
        json["metadata"]["ownerReferences"],
        serde_json::json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1"}])
    );
    let spec = &json["spec"];
    assert_eq!(spec["nodeName"], "n1");
    assert_eq!(spec["restartPolicy"], "Always");
    assert_eq!(spec["terminationGracePeriodSeconds"], 1);
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(
        spec["tolerations"],
        serde_json::json!([{"key": "nodegate.dev/initializing", "operator": "Exists", "effect": "NoSchedule"}])
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(spec.get("hostNetwork").is_none());
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
}
