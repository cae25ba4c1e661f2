//! The writer's unit tests: slots, rate, timeouts and the answers' outcomes,
//! and that canary and owner requests take slots and tokens too.

use super::*;
use kube::core::Status;
use nodegate_actors::ports::{EffectExecutor, Sending};
use nodegate_core::deciders::{CanaryCreate, CanaryDelete, ReplaceAction, ReplaceWrite};
use nodegate_core::gate::{IndexedTaint, OpenedBy, TimeoutMark, UntaintPatch};
use nodegate_core::vocab::model::Taint;
use nodegate_core::vocab::model::{NodeInfo, Owner};
use nodegate_core::vocab::write::Write;

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

/// An untaint patch through the writer's one path, as the executor sends it.
async fn remove_taints(w: &Writer, p: &UntaintPatch) -> PatchOutcome {
    let body = Patch::Json::<()>(crate::cluster::patch::untaint(p));
    w.patch_node((NodeWrite::Untaint, false), &p.node, &body, || true)
        .await
}

/// A timed-out mark through the writer's one path, as the executor sends it.
async fn mark_timed_out(w: &Writer, m: &TimeoutMark) -> PatchOutcome {
    let body = Patch::Merge(crate::cluster::patch::mark_timed_out(m));
    w.patch_node((NodeWrite::MarkTimedOut, false), &m.node, &body, || true)
        .await
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
    let first = tokio::time::timeout(PATIENCE, remove_taints(&w, &untaint("n1")))
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
    let second = tokio::time::timeout(PATIENCE, mark_timed_out(&w, &mark))
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
    let ev = NodeEvent::new(
        "n1",
        "u1",
        EventType::Normal,
        Reason::GateOpened,
        "opened".into(),
    );
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

#[tokio::test(start_paused = true)]
async fn background_requests_leave_half_the_burst_to_the_critical_path() {
    let l = std::sync::Arc::new(RateLimiter::new(10.0, 4));
    let start = Instant::now();
    // Events drain the bucket down to its reserve of 2, and no further.
    l.acquire_background().await;
    l.acquire_background().await;
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "above the reserve: at once"
    );
    let third = {
        let l = l.clone();
        tokio::spawn(async move { l.acquire_background().await })
    };
    tokio::task::yield_now().await;
    assert!(
        !third.is_finished(),
        "the third event must not take the reserve"
    );
    // A burst of openings then goes without waiting.
    l.acquire().await;
    l.acquire().await;
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the critical path's burst must find its reserve"
    );
    // The event goes once the bucket holds a token over the reserve again.
    third.await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(299),
        "{:?}",
        start.elapsed()
    );
}

/// Every request the recording API server below was sent, as `METHOD path`.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// The Machine `ns/m`, owning node `n1` (uid `u1`).
fn machine() -> serde_json::Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "m", "namespace": "ns", "uid": "mu"},
        "status": {"nodeRef": {"name": "n1", "uid": "u1"}},
    })
}

/// A client whose API server records every request, answers a request for
/// the Machine `ns/m` (a GET or a DELETE) with it, and never answers
/// anything else.
fn recording_client(seen: Seen) -> Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let seen = seen.clone();
        async move {
            let line = format!("{} {}", req.method(), req.uri().path());
            seen.lock().unwrap().push(line.clone());
            if !line.ends_with("/machines/m") {
                std::future::pending::<()>().await;
            }
            let body = serde_json::to_vec(&machine()).unwrap();
            http::Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(body))
                .map_err(|e| e.to_string())
        }
    });
    Client::new(service, "default")
}

/// The controller's writer over [`recording_client`], with canaries on.
fn serving(slots: usize, qps: f64, burst: u32, seen: &Seen) -> std::sync::Arc<Writer> {
    let client = recording_client(seen.clone());
    let leader = Arc::new(Leadership::always());
    let metrics = Arc::new(Metrics::new(Arc::clone(&leader)));
    let canaries = Canaries {
        namespace: "nodegate".into(),
        pod: crate::settings::config::CanaryPod {
            image: "registry.k8s.io/pause:3.10".into(),
            image_pull_policy: "IfNotPresent".into(),
            readiness_probe: None,
            resources: Default::default(),
            priority_class_name: None,
        },
        tolerate: Vec::new(),
    };
    let w = Writer::new(
        client,
        slots,
        qps,
        burst,
        Duration::from_secs(10),
        "test".into(),
    );
    Arc::new(w.serving(leader, metrics, Some(canaries)))
}

fn seen_now(seen: &Seen) -> Vec<String> {
    seen.lock().unwrap().clone()
}

/// The one slot held by an untaint the API server never answers (it is
/// given up after 10 s); returns once the untaint is sent.
async fn hold_the_slot(w: &std::sync::Arc<Writer>, seen: &Seen) -> tokio::task::JoinHandle<()> {
    let held = w.clone();
    let task = tokio::spawn(async move {
        let _ = remove_taints(&held, &untaint("n0")).await;
    });
    for _ in 0..1000 {
        if !seen_now(seen).is_empty() {
            return task;
        }
        tokio::task::yield_now().await;
    }
    panic!("the untaint holding the slot was never sent");
}

const UNTAINT: &str = "PATCH /api/v1/nodes/n0";
const MACHINE: &str = "/apis/cluster.x-k8s.io/v1beta1/namespaces/ns/machines/m";

fn delete_owner() -> Write {
    Write::Replace(ReplaceWrite {
        node: "n1".into(),
        uid: "u1".into(),
        resource_version: "7".into(),
        annotations_present: true,
        action: ReplaceAction::DeleteOwner {
            owner: Owner::Machine {
                namespace: "ns".into(),
                name: "m".into(),
            },
            provider_id: None,
        },
    })
}

#[tokio::test(start_paused = true)]
async fn canary_requests_wait_for_a_patch_slot() {
    let seen = Seen::default();
    let w = serving(1, 1000.0, 1000, &seen);
    let held = hold_the_slot(&w, &seen).await;
    let create = Write::CreateCanary(CanaryCreate {
        node: "n1".into(),
        node_uid: "u1".into(),
        name: "nodegate-canary-n1".into(),
        label: "n1".into(),
    });
    let delete = Write::DeleteCanary(CanaryDelete {
        node: "n2".into(),
        name: "nodegate-canary-n2".into(),
        uid: None,
        force: false,
    });
    let writes = [create, delete].map(|write| {
        let w = w.clone();
        tokio::spawn(async move { w.write(write, Sending::default()).await })
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        seen_now(&seen),
        [UNTAINT],
        "a canary request went out without a slot"
    );
    held.await.unwrap();
    for write in writes {
        let outcome = write.await.unwrap();
        assert!(is_ambiguous_timeout(&outcome), "{outcome:?}");
    }
    assert_eq!(
        seen_now(&seen),
        [
            UNTAINT,
            "POST /api/v1/namespaces/nodegate/pods",
            "DELETE /api/v1/namespaces/nodegate/pods/nodegate-canary-n2",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_owners_proof_and_delete_wait_for_a_patch_slot() {
    let seen = Seen::default();
    let w = serving(1, 1000.0, 1000, &seen);
    let held = hold_the_slot(&w, &seen).await;
    let replace = {
        let w = w.clone();
        tokio::spawn(async move { w.write(delete_owner(), Sending::default()).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        seen_now(&seen),
        [UNTAINT],
        "the owner was read without a slot"
    );
    held.await.unwrap();
    let outcome = replace.await.unwrap();
    assert_eq!(outcome, PatchOutcome::OwnerDeleted("machine/ns/m".into()));
    let get = format!("GET {MACHINE}");
    let delete = format!("DELETE {MACHINE}");
    assert_eq!(seen_now(&seen), [UNTAINT, get.as_str(), delete.as_str()]);
}

#[tokio::test(start_paused = true)]
async fn the_owners_delete_waits_for_a_rate_token() {
    let seen = Seen::default();
    // One token, and the next only after 1,000 s: the proof takes it.
    let w = serving(4, 0.001, 1, &seen);
    let replace = {
        let w = w.clone();
        tokio::spawn(async move { w.write(delete_owner(), Sending::default()).await })
    };
    tokio::time::sleep(Duration::from_secs(500)).await;
    let get = format!("GET {MACHINE}");
    assert_eq!(
        seen_now(&seen),
        [get.as_str()],
        "the delete went out without a token"
    );
    let outcome = replace.await.unwrap();
    assert_eq!(outcome, PatchOutcome::OwnerDeleted("machine/ns/m".into()));
    let delete = format!("DELETE {MACHINE}");
    assert_eq!(seen_now(&seen), [get.as_str(), delete.as_str()]);
}

#[tokio::test(start_paused = true)]
async fn a_commands_writer_waits_as_its_request_timeout_says() {
    let body = || Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}}));
    let write = (NodeWrite::Patch, false);
    // `--request-timeout 5s`: given up after 5 s, as perhaps applied.
    let w = Writer::for_command(silent_client(), Some(Duration::from_secs(5)));
    let given_up = tokio::time::timeout(PATIENCE, w.patch_node(write, "n1", &body(), || true))
        .await
        .expect("the patch was still waiting after 10 minutes");
    assert!(
        matches!(&given_up, PatchOutcome::Ambiguous(e) if e.contains("no answer within 5s")),
        "{given_up:?}"
    );
    // No `--request-timeout` (or 0): the writer gives up on nothing.
    let w = Writer::for_command(silent_client(), None);
    let waiting = tokio::time::timeout(PATIENCE, w.patch_node(write, "n1", &body(), || true)).await;
    assert!(waiting.is_err(), "{waiting:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_while_it_waits_for_a_token_holds_back_no_background_one() {
    let l = std::sync::Arc::new(RateLimiter::new(10.0, 1));
    l.acquire().await; // the burst is spent
    // A write waiting for its token, given up (its task aborted) mid-wait.
    let dropped = {
        let l = l.clone();
        tokio::spawn(async move { l.acquire().await })
    };
    tokio::task::yield_now().await;
    dropped.abort();
    assert!(dropped.await.is_err_and(|e| e.is_cancelled()));
    // An Event still goes once the bucket refills above its reserve.
    let event = tokio::time::timeout(Duration::from_secs(60), l.acquire_background()).await;
    assert!(
        event.is_ok(),
        "a background request waited a minute behind a request that no longer waits"
    );
}

/// A client whose API server answers every request `201 {}` and counts
/// the Events created.
fn counting_client() -> (Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let created = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&created);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        if req.method() == http::Method::POST && req.uri().path().ends_with("/events") {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        async {
            let answer = http::Response::builder()
                .status(201)
                .body(kube::client::Body::from(b"{}".to_vec()))
                .expect("a response");
            Ok::<_, std::convert::Infallible>(answer)
        }
    });
    (Client::new(service, "default"), created)
}

#[tokio::test]
async fn a_replica_that_lost_the_lease_still_records_its_own_writes_and_no_decision() {
    let (client, created) = counting_client();
    let leader = Arc::new(Leadership::follower());
    let metrics = Arc::new(Metrics::new(Arc::clone(&leader)));
    let w = Writer::new(
        client,
        1,
        1000.0,
        1000,
        Duration::from_secs(10),
        "test".into(),
    )
    .serving(leader, metrics, None);
    let event = |reason| NodeEvent::new("n1", "u1", EventType::Warning, reason, "note".into());
    let created = || created.load(std::sync::atomic::Ordering::Relaxed);
    // Decisions every replica reaches (a dry run's, a held budget): only
    // the leader says so, whatever their reason.
    for reason in [
        Reason::GateWouldOpen,
        Reason::GateTimedOut,
        Reason::RegateBudgetExhausted,
        // Not said to be its own write: not recorded, whatever the reason.
        Reason::GateOpened,
    ] {
        EffectExecutor::record_event(&w, event(reason)).await;
    }
    assert_eq!(created(), 0);
    // Its own writes, applied before the lease lapsed (an opening, an
    // opening by timeout, a re-gate): nobody else records them.
    for reason in [
        Reason::GateOpened,
        Reason::GateTimedOut,
        Reason::NodeRegated,
    ] {
        EffectExecutor::record_event(&w, event(reason).of_own_write()).await;
    }
    assert_eq!(created(), 3);
}

/// How the stand-in API server of [`node_client`] answers a GET of a node
/// in protobuf.
#[derive(Clone, Copy, Debug)]
enum Answers {
    /// In protobuf: the fixture's node; `gone`: 404 NotFound (a JSON
    /// Status); any other name: 404 with a body of `{}`, as a proxy might.
    Protobuf,
    /// 406 Not Acceptable.
    NotAcceptable,
    /// 200 in JSON anyway.
    Json,
}

const NODE_JSON: &str = include_str!("../../../tests/scale/benches/wire/node.json");
const NODE_PB: &[u8] = include_bytes!("../../../tests/scale/benches/wire/node.pb");

/// A client whose API server answers a GET of the fixture's node in JSON,
/// and in protobuf as `answers` says; it records each request's path and
/// Accept header.
fn node_client(answers: Answers, seen: Seen) -> Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let accept = req.headers().get(http::header::ACCEPT);
        let accept = accept.and_then(|a| a.to_str().ok()).unwrap_or_default();
        let path = req.uri().path().to_owned();
        seen.lock().unwrap().push(format!("{path} {accept}"));
        let json = "application/json";
        let protobuf = crate::cluster::protobuf::MEDIA_TYPE;
        let (status, kind, body) = match answers {
            _ if !accept.starts_with(protobuf) => (200, json, NODE_JSON.as_bytes().to_vec()),
            Answers::Protobuf if path == "/api/v1/nodes/bench-00001" => {
                (200, protobuf, NODE_PB.to_vec())
            }
            Answers::Protobuf if path == "/api/v1/nodes/gone" => {
                let status = Status::failure("nodes \"gone\" not found", "NotFound").with_code(404);
                (404, json, serde_json::to_vec(&status).unwrap())
            }
            Answers::Protobuf => (404, json, b"{}".to_vec()),
            Answers::NotAcceptable => (406, json, b"{}".to_vec()),
            Answers::Json => (200, json, NODE_JSON.as_bytes().to_vec()),
        };
        async move {
            http::Response::builder()
                .status(status)
                .header("content-type", kind)
                .body(kube::client::Body::from(body))
                .map_err(|e| e.to_string())
        }
    });
    Client::new(service, "default")
}

/// The fixture's node as `project::node` reads its JSON.
fn fixture_node() -> NodeInfo {
    let node: Node = serde_json::from_str(NODE_JSON).expect("the node fixture");
    let info = project::node(&node).0.expect("a projected node");
    assert_eq!(info.name, "bench-00001", "the stand-in serves this name");
    info
}

fn writer_over(client: Client) -> Writer {
    Writer::new(
        client,
        1,
        1000.0,
        1000,
        Duration::from_secs(10),
        "test".into(),
    )
}

#[tokio::test]
async fn a_node_is_re_read_in_protobuf_and_projects_as_its_json_does() {
    let want = fixture_node();
    let seen = Seen::default();
    let w = writer_over(node_client(Answers::Protobuf, seen.clone()));
    let read = w.get_node(&want.name).await;
    assert_eq!(read.as_ref().ok(), Some(&Some(want)), "{read:?}");
    // The API server's 404 NotFound: no such node.
    let missing = w.get_node("gone").await;
    assert!(matches!(missing, Ok(None)), "{missing:?}");
    // A 404 that is not the API server's says nothing about the node: an
    // error the gate retries, never "gone" (which would stop it).
    let unknown = w.get_node("behind-a-proxy").await;
    assert!(
        unknown
            .as_ref()
            .is_err_and(|e| e.contains("behind-a-proxy") && e.contains("404")),
        "{unknown:?}"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter().all(|r| r.contains("protobuf")),
        "no JSON read: {seen:?}"
    );
}

#[tokio::test]
async fn a_node_read_refused_in_protobuf_is_read_as_json_from_then_on() {
    let want = fixture_node();
    for answers in [Answers::NotAcceptable, Answers::Json] {
        let seen = Seen::default();
        let w = writer_over(node_client(answers, seen.clone()));
        for _ in 0..2 {
            let read = w.get_node(&want.name).await;
            assert_eq!(
                read.as_ref().ok(),
                Some(&Some(want.clone())),
                "{answers:?}: {read:?}"
            );
        }
        let seen = seen.lock().unwrap().clone();
        let protobuf = seen.iter().filter(|r| r.contains("protobuf")).count();
        assert_eq!(
            protobuf, 1,
            "{answers:?}: protobuf once, then JSON: {seen:?}"
        );
        assert_eq!(seen.len(), 3, "{answers:?}: {seen:?}");
        let path = format!("/api/v1/nodes/{} ", want.name);
        assert!(seen.iter().all(|r| r.starts_with(&path)), "{seen:?}");
    }
}
