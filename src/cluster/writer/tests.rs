//! The writer's unit tests: slots, rate, timeouts and the answers' outcomes.

use super::*;
use kube::core::Status;
use nodegate_core::gate::{IndexedTaint, OpenedBy};
use nodegate_core::vocab::model::Taint;

/// A client whose API server takes every request and never answers: a
/// hung connection.
fn silent_client() -> Client {
    let service = tower::service_fn(|_req: http::Request<kube::client::Body>| {
        std::future::pending::<Result<http::Response<kube::client::Body>, std::convert::Infallible>>(
        )
    });
    Client::new(service, "default")
}

/// A writer with `slots` patch slots, no rate limit to speak of, and the
/// default 10 s request timeout.
fn writer(slots: usize) -> Writer {
    Writer::new(
        silent_client(),
        slots,
        1000.0,
        1000,
        Duration::from_secs(10),
        "test".into(),
    )
}

fn untaint(node: &str) -> UntaintPatch {
    UntaintPatch {
        node: node.into(),
        resource_version: "7".into(),
        taints: vec![IndexedTaint {
            index: 0,
            taint: Taint::new("nodegate.dev/initializing", "", "NoSchedule"),
        }],
        opened_by: OpenedBy::Ready,
        opened_at: jiff::Timestamp::UNIX_EPOCH,
        annotations_present: true,
        clear_replace_request: false,
        cordoned: false,
    }
}

/// Far longer than any request may take: a call still waiting then has
/// no timeout at all.
const PATIENCE: Duration = Duration::from_secs(600);

fn is_ambiguous_timeout(o: &PatchOutcome) -> bool {
    matches!(o, PatchOutcome::Ambiguous(e) if e.contains("no answer within 10s"))
}

#[tokio::test(start_paused = true)]
async fn a_write_left_unanswered_is_given_up_as_ambiguous_and_frees_its_slot() {
    let w = writer(1);
    let start = Instant::now();
    let first = tokio::time::timeout(PATIENCE, w.remove_taints(&untaint("n1"), || true))
        .await
        .expect("the patch was still waiting after 10 minutes: no per-request timeout");
    assert!(is_ambiguous_timeout(&first), "{first:?}");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "{waited:?}"
    );
    // The one patch slot is free again for the next write.
    let mark = TimeoutMark {
        node: "n2".into(),
        deadline: jiff::Timestamp::UNIX_EPOCH,
    };
    let second = tokio::time::timeout(PATIENCE, w.mark_timed_out(&mark, || true))
        .await
        .expect("the slot of the hung patch was never freed");
    assert!(is_ambiguous_timeout(&second), "{second:?}");
    assert!(start.elapsed() < Duration::from_secs(21));
}

#[tokio::test(start_paused = true)]
async fn a_read_left_unanswered_is_given_up() {
    let w = writer(1);
    let read = tokio::time::timeout(PATIENCE, w.get_node("n1"))
        .await
        .expect("the re-read was still waiting after 10 minutes");
    assert!(
        read.as_ref()
            .is_err_and(|e| e.contains("n1") && e.contains("no answer within 10s")),
        "{read:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_event_left_unanswered_is_given_up() {
    let w = writer(1);
    let ev = NodeEvent {
        node: "n1".into(),
        node_uid: "u1".into(),
        type_: EventType::Normal,
        reason: Reason::GateOpened,
        note: "opened".into(),
    };
    tokio::time::timeout(PATIENCE, w.record_event(&ev))
        .await
        .expect("the Event was still waiting after 10 minutes");
}

#[test]
fn answers_that_may_hide_an_applied_write_are_ambiguous() {
    let api = |code: u16| {
        outcome(Err(kube::Error::Api(
            Status::failure("boom", "InternalError")
                .with_code(code)
                .boxed(),
        )))
    };
    for code in [500, 502, 503, 504] {
        assert!(
            matches!(api(code), PatchOutcome::Ambiguous(_)),
            "{code}: {:?}",
            api(code)
        );
    }
    for code in [400, 401, 403, 429] {
        assert!(
            matches!(api(code), PatchOutcome::Failed(_)),
            "{code}: {:?}",
            api(code)
        );
    }
    assert_eq!(api(409), PatchOutcome::Conflict);
    assert_eq!(api(422), PatchOutcome::Conflict);
    // Hardening: the answers of the real API server to a
    // failed `test` op and to an invalid taint value.
    let answer = |json: serde_json::Value| {
        let status: Status = serde_json::from_value(json).expect("a Status");
        outcome(Err(kube::Error::Api(status.boxed())))
    };
    let test_failed = answer(json!({
        "status": "Failure", "code": 422, "reason": "Invalid",
        "message": "the server rejected our request due to an error in our request",
        "details": {"causes": [{"reason": "UnexpectedServerResponse",
            "message": "testing value /metadata/resourceVersion failed: test failed"}]},
    }));
    assert_eq!(test_failed, PatchOutcome::Conflict);
    let invalid = answer(json!({
        "status": "Failure", "code": 422, "reason": "Invalid",
        "message": "Node \"n\" is invalid: spec.taints[0].value: Invalid value: \"not valid\"",
        "details": {"name": "n", "kind": "Node", "causes": [{"reason": "FieldValueInvalid",
            "message": "Invalid value: \"not valid\"", "field": "spec.taints[0].value"}]},
    }));
    assert!(
        matches!(invalid, PatchOutcome::Failed(ref e) if e.contains("not valid")),
        "{invalid:?}"
    );
    assert_eq!(api(404), PatchOutcome::NotFound);
    // The connection broke: sent, perhaps applied.
    let reset = outcome(Err(kube::Error::Service("connection reset by peer".into())));
    assert!(matches!(reset, PatchOutcome::Ambiguous(_)), "{reset:?}");
    // Never sent.
    let unsent = outcome(Err(kube::Error::TlsRequired));
    assert!(matches!(unsent, PatchOutcome::Failed(_)), "{unsent:?}");
}

#[tokio::test(start_paused = true)]
async fn rate_limiter_lets_a_burst_through_then_paces() {
    let l = RateLimiter::new(10.0, 3);
    let start = Instant::now();
    for _ in 0..3 {
        l.acquire().await;
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "the burst must not wait");
    l.acquire().await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(99),
        "the fourth request must wait ~100ms, waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn background_requests_yield_to_waiting_ones() {
    let l = std::sync::Arc::new(RateLimiter::new(10.0, 1));
    l.acquire().await; // the burst is spent
    let start = Instant::now();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (bg, fg) = {
        let (l1, o1) = (l.clone(), order.clone());
        let bg = tokio::spawn(async move {
            l1.acquire_background().await;
            o1.lock().unwrap().push(("event", start.elapsed()));
        });
        tokio::task::yield_now().await;
        let (l2, o2) = (l.clone(), order.clone());
        let fg = tokio::spawn(async move {
            l2.acquire().await;
            o2.lock().unwrap().push(("patch", start.elapsed()));
        });
        (bg, fg)
    };
    bg.await.unwrap();
    fg.await.unwrap();
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(w, _)| *w).collect::<Vec<_>>(),
        vec!["patch", "event"],
        "the patch must go first although the event asked first: {order:?}"
    );
    assert!(
        order[1].1 >= Duration::from_millis(199),
        "the event waits for the next free token: {order:?}"
    );
}
