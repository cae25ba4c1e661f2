//! `suspend` stops the condition-rule tainter like every writer: the
//! configuration's switch and the node's annotation alike.

use super::*;

#[test]
fn suspend_in_the_configuration_writes_nothing_until_it_is_lifted() {
    let mut r = run(vec![oos()]);
    r.config.suspend = true;
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    let out = r.step(&mut t, everything());
    assert!(writes(&out).is_empty(), "{out:?}");
    let info = logs(&out, Level::Info);
    assert_eq!(info.len(), 1, "{out:?}");
    assert!(
        info[0].starts_with("suspended: would put the condition taint on (rule oos"),
        "{info:?}"
    );
    // Said once while it stays so.
    let change = r.index.upsert(shut("n1", 2));
    assert!(r.step(&mut t, change).is_empty(), "logged once");
    // Lifted (a reload brings `Everything`): written.
    r.config.suspend = false;
    let out = r.step(&mut t, everything());
    assert_eq!(writes(&out).len(), 1, "{out:?}");
}

#[test]
fn a_suspended_node_gets_no_condition_taint() {
    let mut r = run(vec![oos()]);
    let mut t = Closing::default();
    let mut n = shut("n1", 1);
    n.suspended = true;
    r.index.upsert(n);
    let out = r.step(&mut t, everything());
    assert!(writes(&out).is_empty(), "{out:?}");
    assert_eq!(logs(&out, Level::Info).len(), 1, "{out:?}");
    // The annotation taken off: written.
    let change = r.index.upsert(shut("n1", 2));
    assert_eq!(writes(&r.step(&mut t, change)).len(), 1);
}
