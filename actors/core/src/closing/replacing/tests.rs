use super::*;
use crate::testutil::{ds_pod, mk_ds};

#[test]
fn the_budget_refuses_in_flight_first_then_the_rate() {
    let rc = ReplaceConfig {
        budget: 2,
        in_flight: 1,
        ..ReplaceConfig::default()
    };
    let used = |recent, in_flight| Used { recent, in_flight };
    assert_eq!(budget_allows(&rc, used(0, 0)), Ok(()));
    assert_eq!(budget_allows(&rc, used(1, 0)), Ok(()));
    assert!(matches!(
        budget_allows(&rc, used(0, 1)),
        Err(Exhausted::InFlight {
            in_flight: 1,
            limit: 1
        })
    ));
    assert!(matches!(
        budget_allows(&rc, used(2, 0)),
        Err(Exhausted::Rate {
            recent: 2,
            budget: 2,
            ..
        })
    ));
    let zero = ReplaceConfig {
        budget: 0,
        ..ReplaceConfig::default()
    };
    assert!(budget_allows(&zero, used(0, 0)).is_err());
    let words = Exhausted::Rate {
        recent: 2,
        budget: 2,
        interval: std::time::Duration::from_secs(600),
    }
    .to_string();
    assert!(words.contains("last 10m"), "{words}");
}

#[test]
fn broken_cluster_wide_means_failing_on_two_or_more_and_more_than_the_share() {
    let s = |failing, nodes| Spread {
        failing,
        nodes,
        due: 0,
    };
    let twenty = MaxUnavailable::Percent(20);
    // Alone: never cluster-wide.
    assert!(!s(1, 1).broken(twenty));
    assert!(!s(1, 50).broken(twenty));
    // 2 of 10: 20 % allows 2.
    assert!(!s(2, 10).broken(twenty));
    assert!(s(3, 10).broken(twenty));
    assert!(s(2, 2).broken(twenty));
    assert!(s(2, 5).broken(MaxUnavailable::Count(1)));
    assert!(!s(2, 5).broken(MaxUnavailable::Count(2)));
    // What two due nodes wait for: broken, whatever the share.
    let shared = |due| Spread {
        failing: due,
        nodes: 1_000,
        due,
    };
    assert!(!shared(1).broken(twenty));
    assert!(shared(2).broken(twenty));
    // 100 % judges nothing broken.
    assert!(!shared(2).broken(MaxUnavailable::Percent(100)));
}

#[test]
fn a_spread_counts_nodes_with_a_pod_and_those_with_none_ready() {
    let ds = mk_ds("infra", "cni", Default::default());
    let mut spread = Spread::default();
    let ready = ds_pod("a", "n1", &ds);
    let mut unready = ds_pod("b", "n2", &ds);
    unready.ready = false;
    let mut leaving = ds_pod("c", "n3", &ds);
    leaving.terminating = true;
    spread.count(&ds, [&ready]);
    spread.count(&ds, [&unready]);
    spread.count(&ds, [&leaving]);
    spread.count(&ds, []);
    assert_eq!(
        spread,
        Spread {
            failing: 1,
            nodes: 2,
            due: 0
        }
    );
}

#[test]
fn fallbacks_parse_and_name_the_choices() {
    assert_eq!("open".parse(), Ok(Fallback::Open));
    assert_eq!(" keep ".parse(), Ok(Fallback::Keep));
    let e = "replace".parse::<Fallback>().unwrap_err();
    assert!(e.to_string().contains("use open or keep"), "{e}");
}
