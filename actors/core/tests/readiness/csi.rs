//! The `nodegate.dev/csi-driver` annotation: at most
//! `MAX_CSI_DRIVERS` names are waited for, each a valid CSI driver name;
//! the rest are reported and never waited for.

use nodegate_core::rules::readiness::{
    MAX_CSI_DRIVERS, csi_driver_problems, csi_drivers, is_csi_driver_name, is_dns1123_label,
};
use nodegate_core::testutil::mk_ds;
use nodegate_core::vocab::annotations::CSI_DRIVER;
use nodegate_core::vocab::model::{DaemonSetInfo, PodPlacement};

fn annotated(value: &str) -> DaemonSetInfo {
    let mut ds = mk_ds("kube-system", "csi", PodPlacement::default());
    ds.annotations
        .insert(CSI_DRIVER.to_string().into(), value.to_string().into());
    ds
}

#[test]
fn valid_names_are_waited_for_and_blank_entries_skipped() {
    let ds = annotated("ebs.csi.aws.com, ,efs.csi.aws.com");
    assert_eq!(csi_drivers(&ds), ["ebs.csi.aws.com", "efs.csi.aws.com"]);
    assert_eq!(csi_driver_problems(&ds), None);
    assert!(csi_drivers(&mk_ds("kube-system", "x", PodPlacement::default())).is_empty());
}

#[test]
fn invalid_names_are_reported_and_not_waited_for() {
    let long = "a".repeat(64);
    let ds = annotated(&format!("Bad_Name,ok.example.com,-dash,{long},x..y"));
    assert_eq!(csi_drivers(&ds), ["ok.example.com"]);
    let problem = csi_driver_problems(&ds).expect("reported");
    for bad in ["Bad_Name", "-dash", long.as_str(), "x..y"] {
        assert!(problem.contains(bad), "{bad} missing from {problem}");
    }
    assert!(problem.contains(CSI_DRIVER), "{problem}");
}

#[test]
fn at_most_max_names_are_waited_for() {
    let names: Vec<String> = (0..MAX_CSI_DRIVERS + 3)
        .map(|i| format!("d{i}.example.com"))
        .collect();
    let ds = annotated(&names.join(","));
    let wanted = csi_drivers(&ds);
    assert_eq!(wanted.len(), MAX_CSI_DRIVERS);
    assert_eq!(wanted[0], "d0.example.com");
    let problem = csi_driver_problems(&ds).expect("the surplus is reported");
    assert!(
        problem.contains(&format!("d{MAX_CSI_DRIVERS}.example.com")),
        "{problem}"
    );
}

#[test]
fn name_syntax() {
    for ok in [
        "a",
        "kube-system",
        "ebs.csi.aws.com",
        "x1-y2.z",
        &"a".repeat(63),
    ] {
        assert!(is_csi_driver_name(ok), "{ok}");
    }
    for bad in [
        "",
        "A",
        "a_b",
        "-a",
        "a-",
        ".a",
        "a.",
        "a..b",
        &"a".repeat(64),
    ] {
        assert!(!is_csi_driver_name(bad), "{bad:?}");
    }
    assert!(is_dns1123_label("tenant-1"));
    assert!(!is_dns1123_label("tenant.one"));
    assert!(!is_dns1123_label(""));
}
