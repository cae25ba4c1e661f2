//! The journal as `/debug/nodes/NAME` and the debug log lines show it: one
//! externally tagged JSON object per event, which reads back to the same
//! entries (so a journal taken from a live process can be replayed offline).

mod gate_support;

use gate_support::*;
use nodegate_core::gate::journal::{Entry, replay};
use nodegate_core::gate::{Event, Input};
use serde_json::json;

#[test]
fn pod_status_change_is_journalled_as_a_short_line_that_reads_back() {
    let agent = tolerant_ds("agent");
    let mut g = Gate::new(cfg());
    g.start(
        gated_node(),
        vec![agent.clone()],
        vec![unready_pod("agent-x1", &agent)],
    );
    g.at(3)
        .feed(Input::pod_upserted(ready_pod("agent-x1", &agent)));

    let entries: Vec<Entry> = g.journal.entries().collect();
    let status_line = entries
        .iter()
        .find(|e| matches!(e.event, Event::PodStatusChanged { .. }))
        .map(|e| serde_json::to_value(&e.event))
        .expect("the readiness flip is journalled as a status change")
        .expect("an event serializes");
    assert_eq!(
        status_line,
        json!({"pod_status_changed": {
            "pod": "agent-x1",
            "uid": "uid-agent-x1",
            "phase": "Running",
            "ready": true,
            "ready_since": "1970-01-01T00:00:00Z",
        }})
    );

    let text = serde_json::to_string(&entries).expect("a journal serializes");
    let back: Vec<Entry> = serde_json::from_str(&text).expect("a journal reads back");
    assert_eq!(back, entries);
    assert_eq!(replay(&g.journal), g.state);
}
