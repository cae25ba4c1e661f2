use std::cmp::Ordering::{Equal, Greater, Less};

use super::pools::{Pool, pools};
use super::quantity::{QuantityError, sign};
use super::*;
use crate::rules::selector::LabelSelector;
use crate::vocab::model::SliceInfo;

#[test]
fn quantity_signs_follow_the_api_grammar() {
    for (text, want) in [
        ("1", Greater),
        ("8", Greater),
        ("0", Equal),
        ("000", Equal),
        ("0.0", Equal),
        ("-0", Equal),
        ("+2", Greater),
        ("-1", Less),
        ("1k", Greater),
        ("2Ki", Greater),
        ("500m", Greater),
        ("1n", Greater),
        ("0.1m", Greater),
        (".5", Greater),
        ("5.", Greater),
        ("0Gi", Equal),
        ("1e3", Greater),
        ("1E-3", Greater),
        ("0e9", Equal),
        ("-3e+2", Less),
    ] {
        assert_eq!(sign(text), Ok(want), "{text}");
    }
}

#[test]
fn text_that_is_not_a_quantity_is_refused_naming_the_part() {
    for (text, want) in [
        ("", QuantityError::Empty),
        ("-", QuantityError::NoDigits),
        ("Gi", QuantityError::NoDigits),
        (".", QuantityError::NoDigits),
        ("1 ", QuantityError::Suffix(" ".into())),
        ("1GB", QuantityError::Suffix("GB".into())),
        ("1ki", QuantityError::Suffix("ki".into())),
        ("1e", QuantityError::Suffix("e".into())),
        ("1e1.5", QuantityError::Suffix("e1.5".into())),
        ("1.2.3", QuantityError::Suffix(".3".into())),
        ("--1", QuantityError::NoDigits),
        ("lots", QuantityError::NoDigits),
    ] {
        assert_eq!(sign(text), Err(want), "{text:?}");
    }
}

fn node(allocatable: &[(&str, &str)], slices: Vec<SliceInfo>) -> NodeInfo {
    NodeInfo {
        name: "gpu-1".into(),
        uid: "uid-gpu-1".into(),
        labels: [("gpu".into(), "true".into())].into(),
        extended_allocatable: allocatable
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        resource_slices: slices,
        ..Default::default()
    }
}

fn gpu() -> CriticalResource {
    CriticalResource {
        resource: "nvidia.com/gpu".into(),
        node_selector: Some(LabelSelector::parse("gpu=true").unwrap()),
    }
}

#[test]
fn a_resource_is_ready_only_above_zero_and_says_why_not() {
    for (allocatable, want) in [
        (
            &[("nvidia.com/gpu", "8")][..],
            Ok("allocatable nvidia.com/gpu=8"),
        ),
        (&[], Err("reports no allocatable nvidia.com/gpu yet")),
        (
            &[("example.com/other", "1")],
            Err("no allocatable nvidia.com/gpu"),
        ),
        (
            &[("nvidia.com/gpu", "0")],
            Err("is 0, waiting for more than 0"),
        ),
        (&[("nvidia.com/gpu", "-1")], Err("negative")),
        (
            &[("nvidia.com/gpu", "eight")],
            Err("\"eight\", which is not a quantity"),
        ),
    ] {
        let got = gpu().judge(&node(allocatable, vec![]));
        match (&got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w),
            (Err(g), Err(w)) => assert!(g.contains(w), "{g:?} lacks {w:?}"),
            _ => panic!("{allocatable:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn the_node_selector_decides_where_a_device_member_applies() {
    let mut n = node(&[], vec![]);
    assert!(gpu().applies(&n));
    let dra = DraDriver {
        driver: "gpu.nvidia.com".into(),
        node_selector: Some(LabelSelector::parse("gpu=true").unwrap()),
    };
    assert!(dra.applies(&n));
    n.labels.clear();
    assert!(!gpu().applies(&n));
    assert!(!dra.applies(&n));
    let everywhere = CriticalResource {
        node_selector: None,
        ..gpu()
    };
    assert!(everywhere.applies(&n));
}

fn slice(name: &str, driver: &str, pool: &str, generation: i64, count: i64) -> SliceInfo {
    SliceInfo {
        name: name.into(),
        driver: driver.into(),
        pool: pool.into(),
        generation,
        slice_count: count,
        owner_uid: "uid-gpu-1".into(),
    }
}

const D: &str = "gpu.nvidia.com";

#[test]
fn a_pool_counts_only_its_highest_generation() {
    let slices = vec![
        slice("a", D, "p", 1, 2),
        slice("b", D, "p", 1, 2),
        slice("c", D, "p", 2, 2),
        slice("d", "other.example.com", "p", 9, 1),
    ];
    assert_eq!(
        pools(&slices, D),
        vec![Pool {
            name: "p".into(),
            generation: 2,
            seen: 1,
            counts: vec![2],
        }]
    );
    // The order slices arrive in does not matter.
    let mut reversed = slices.clone();
    reversed.reverse();
    assert_eq!(pools(&reversed, D), pools(&slices, D));
}

fn dra() -> DraDriver {
    DraDriver {
        driver: D.into(),
        node_selector: None,
    }
}

fn judge(slices: Vec<SliceInfo>) -> Result<String, String> {
    dra().judge(&node(&[], slices))
}

#[test]
fn a_driver_is_ready_once_every_pool_for_the_node_is_complete() {
    let cases: Vec<(&str, Vec<SliceInfo>, Result<&str, &str>)> = vec![
        (
            "no slice at all",
            vec![],
            Err("has published no ResourceSlice for the node yet"),
        ),
        (
            "only another driver's",
            vec![slice("x", "other.example.com", "p", 1, 1)],
            Err("published no ResourceSlice"),
        ),
        (
            "one slice of one",
            vec![slice("a", D, "gpu-1", 1, 1)],
            Ok("pool gpu-1 complete (1 of 1 ResourceSlices at generation 1)"),
        ),
        (
            "one slice of two",
            vec![slice("a", D, "gpu-1", 1, 2)],
            Err("pool gpu-1 incomplete: 1 of 2 ResourceSlices at generation 1 (1 missing)"),
        ),
        (
            "two of two",
            vec![slice("a", D, "gpu-1", 3, 2), slice("b", D, "gpu-1", 3, 2)],
            Ok("2 of 2"),
        ),
        (
            "one complete pool, one not",
            vec![
                slice("a", D, "p1", 1, 1),
                slice("b", D, "p2", 1, 3),
                slice("c", D, "p2", 1, 3),
            ],
            Err("pool p2 incomplete: 2 of 3"),
        ),
        (
            "more slices than stated",
            vec![slice("a", D, "p", 1, 1), slice("b", D, "p", 1, 1)],
            Err("more than the 1 they state"),
        ),
        (
            "slices that disagree on the count",
            vec![slice("a", D, "p", 1, 1), slice("b", D, "p", 1, 2)],
            Err("disagree on resourceSliceCount (1, 2)"),
        ),
    ];
    for (what, slices, want) in cases {
        let got = judge(slices);
        match (&got, want) {
            (Ok(g), Ok(w)) | (Err(g), Err(w)) => {
                assert!(g.contains(w), "{what}: {g:?} lacks {w:?}")
            }
            _ => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn slices_moving_to_a_new_generation_hold_the_pool_until_all_have_moved() {
    // A driver re-publishing its pool of two slices: each slice is updated
    // to generation 2 in turn.
    let before = vec![slice("a", D, "p", 1, 2), slice("b", D, "p", 1, 2)];
    assert!(judge(before).is_ok());
    let halfway = vec![slice("a", D, "p", 2, 2), slice("b", D, "p", 1, 2)];
    let why = judge(halfway).unwrap_err();
    assert!(
        why.contains("1 of 2 ResourceSlices at generation 2"),
        "{why}"
    );
    let after = vec![slice("a", D, "p", 2, 2), slice("b", D, "p", 2, 2)];
    assert!(judge(after).is_ok());
    // Shrinking to one slice at generation 3: the old one no longer counts.
    let shrunk = vec![slice("a", D, "p", 3, 1), slice("b", D, "p", 2, 2)];
    assert!(judge(shrunk).is_ok());
}

#[test]
fn a_deleted_slice_makes_its_pool_incomplete_again() {
    let all = vec![slice("a", D, "p", 1, 2), slice("b", D, "p", 1, 2)];
    assert!(judge(all.clone()).is_ok());
    let why = judge(all[..1].to_vec()).unwrap_err();
    assert!(
        why.contains("1 of 2") && why.contains("(1 missing)"),
        "{why}"
    );
    assert!(judge(vec![]).is_err());
}

#[test]
fn names_are_checked_as_kubernetes_does() {
    for ok in ["nvidia.com/gpu", "example.com/foo_bar.1", "a/b"] {
        assert_eq!(check_resource_name(ok), Ok(()), "{ok}");
    }
    for (bad, why) in [
        ("gpu", "domain prefix"),
        ("nvidia.com/", "must not be empty"),
        ("Nvidia.com/gpu", "DNS subdomain"),
        ("nvidia.com/gpu!", "nvidia.com/gpu!"),
        ("a/b/c", "at most one"),
        ("", "must not be empty"),
    ] {
        let e = check_resource_name(bad).unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")) && e.contains(why), "{e}");
    }
}

#[test]
fn lists_are_refused_naming_the_entry_and_the_value() {
    let r = |name: &str| CriticalResource {
        resource: name.into(),
        node_selector: None,
    };
    let d = |name: &str| DraDriver {
        driver: name.into(),
        node_selector: None,
    };
    assert_eq!(validate_resources(&[r("a.io/x"), r("b.io/y")]), Ok(()));
    let e = validate_resources(&[r("a.io/x"), r("a.io/x")]).unwrap_err();
    assert_eq!(e.index, 1);
    assert!(e.error.to_string().contains("\"a.io/x\" is listed twice"));
    let e = validate_resources(&[r("a.io/x"), r("gpu")]).unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(validate_drivers(&[d("gpu.nvidia.com")]), Ok(()));
    for bad in ["GPU.nvidia.com", "gpu_nvidia", "", &"a".repeat(64)] {
        let e = validate_drivers(&[d(bad)]).unwrap_err();
        assert!(e.error.to_string().contains(&format!("{bad:?}")), "{e:?}");
    }
}

/// Anyone who may create ResourceSlices could complete a pool for any
/// node: only slices owned by the node itself (its name and UID in their
/// ownerReference) count.
#[test]
fn only_slices_the_node_owns_count() {
    let owned = |name: &str| slice(name, D, "p", 1, 2);
    let foreign = |name: &str, uid: &str| SliceInfo {
        owner_uid: uid.into(),
        ..slice(name, D, "p", 1, 2)
    };
    // The pool completed by a slice of no owner, or of a node of the same
    // name before (another UID): still incomplete.
    for stranger in ["", "uid-gpu-1-before"] {
        let why = judge(vec![owned("a"), foreign("b", stranger)]).unwrap_err();
        assert!(why.contains("1 missing"), "{stranger:?}: {why}");
    }
    // A whole pool published by a stranger at a high generation: nothing.
    let why = judge(vec![SliceInfo {
        generation: 999,
        slice_count: 1,
        ..foreign("x", "")
    }])
    .unwrap_err();
    assert!(
        why.contains("no ResourceSlice") && why.contains("1 of its slices for the node ignored"),
        "{why}"
    );
    // Beside the node's own complete pool, a stranger's slice changes nothing.
    assert!(judge(vec![owned("a"), owned("b"), foreign("c", "")]).is_ok());
}
