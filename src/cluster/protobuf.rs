//! The hot watches (nodes, DaemonSets, DaemonSet pods) in the API server's
//! protobuf encoding: a list in pages, then a watch from its
//! resourceVersion, as kube's `watcher` does for JSON, with the same events
//! out. Decoding reads only what the projections use (`messages`): a kwok
//! node decodes about 3× faster than the lean JSON, a DaemonSet's pod 5–8×
//! (`cargo bench -p nodegate-scale --bench wire`).
//!
//! An API server that will not answer in protobuf (406, or an answer in
//! another encoding) ends [`run`]; the caller then watches that kind as
//! JSON for the rest of the process. [`get`] reads one object the same way
//! (the gates' re-read of their node), and says so when it is refused.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{GetParams, ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::core::Request;
use kube::runtime::watcher::{self, Event, ListSemantic};
use nodegate_core::vocab::backoff::Backoff;
use prost::Message;

use crate::cluster::lean::Lean;
use crate::cluster::project::view::{NodeView, PodView, Text};

pub mod messages;

use messages::{List, Status, Unknown, WatchEvent};

/// The media type of a protobuf answer.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What precedes every enveloped protobuf object.
const MAGIC: &[u8] = b"k8s\0";

/// A watch frame longer than this is refused as corrupt (the API server's
/// own request limit for an object is 3 MiB; a list's page is not framed).
const MAX_FRAME: usize = 64 << 20;

/// A watch's `timeoutSeconds` when the config sets none (kube's default).
const WATCH_TIMEOUT: u32 = 290;

/// Waits between failed lists or watches, as kube's `watcher` waits.
const RETRY: Backoff = Backoff::new(Duration::from_millis(800), Duration::from_secs(30));

/// A kind watched in protobuf: its message and how it becomes the type the
/// watch's projection reads.
pub trait Proto: Sized {
    type Message: Message + Default + fmt::Debug;
    fn from_message(m: Self::Message) -> Self;
    /// The object's resourceVersion (a watch goes on from the last one).
    fn resource_version(&self) -> Option<&str>;
}

/// A node or a pod as its watch delivered it: the protobuf message, which
/// the projection reads in place (nothing is copied out of the frame but
/// what the projection keeps), or, where the API server refuses protobuf,
/// the object decoded from JSON.
#[derive(Debug, Clone)]
pub enum Wire<K, M> {
    Json(Lean<K>),
    Proto(M),
}

/// JSON decodes as JSON: what the memory example and the tests feed.
impl<'de, K, M> serde::Deserialize<'de> for Wire<K, M>
where
    Lean<K>: serde::Deserialize<'de>,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lean::<K>::deserialize(d).map(Wire::Json)
    }
}

pub type WireNode = Wire<Node, messages::Node>;
pub type WirePod = Wire<Pod, messages::Pod>;

impl WireNode {
    pub fn view(&self) -> NodeView<'_> {
        match self {
            Wire::Json(Lean(n)) => NodeView::of(n),
            Wire::Proto(m) => m.view(),
        }
    }

    pub fn created(&self) -> Option<Timestamp> {
        match self {
            Wire::Json(Lean(n)) => n.metadata.creation_timestamp.as_ref().map(|t| t.0),
            Wire::Proto(m) => m.created(),
        }
    }
}

impl WirePod {
    pub fn view(&self) -> PodView<'_> {
        match self {
            Wire::Json(Lean(p)) => PodView::of(p),
            Wire::Proto(m) => m.view(),
        }
    }

    pub fn created(&self) -> Option<Timestamp> {
        match self {
            Wire::Json(Lean(p)) => p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            Wire::Proto(m) => m.created(),
        }
    }

    /// The node it is bound to and its uid ("" for either it lacks).
    pub fn bound_id(&self) -> (Text<'_>, Text<'_>) {
        match self {
            Wire::Json(Lean(p)) => {
                let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                let uid = p.metadata.uid.as_deref();
                (
                    node.unwrap_or_default().into(),
                    uid.unwrap_or_default().into(),
                )
            }
            Wire::Proto(m) => m.bound_id(),
        }
    }
}

impl Proto for WireNode {
    type Message = messages::Node;
    fn from_message(m: Self::Message) -> Self {
        Wire::Proto(m)
    }
    fn resource_version(&self) -> Option<&str> {
        match self {
            Wire::Json(Lean(n)) => n.metadata.resource_version.as_deref(),
            Wire::Proto(m) => m.resource_version(),
        }
    }
}

impl Proto for WirePod {
    type Message = messages::Pod;
    fn from_message(m: Self::Message) -> Self {
        Wire::Proto(m)
    }
    fn resource_version(&self) -> Option<&str> {
        match self {
            Wire::Json(Lean(p)) => p.metadata.resource_version.as_deref(),
            Wire::Proto(m) => m.resource_version(),
        }
    }
}

impl Proto for DaemonSet {
    type Message = messages::DaemonSet;
    fn from_message(m: Self::Message) -> Self {
        m.into()
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

/// Why a list or a watch failed.
#[derive(Debug)]
pub enum Error {
    /// The request could not be made or its answer read.
    Http(kube::Error),
    /// The API server answered with an error.
    Status(Status),
    /// An answer that is not the protobuf it claims to be.
    Decode(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Http(e) => write!(f, "{e}"),
            Error::Status(s) => {
                let code = s.code.unwrap_or_default();
                let reason = s.reason.as_deref().unwrap_or_default();
                let message = s.message.as_deref().unwrap_or_default();
                write!(f, "the API server answered {code} {reason}: {message}")
            }
            Error::Decode(what) => write!(f, "undecodable protobuf: {what}"),
        }
    }
}

impl Error {
    /// 410 Gone: the resourceVersion (or a list's continue token) is too
    /// old, and only a new list can go on. A watch's ERROR event carries it
    /// in its Status, which names it by reason too (`Expired`, `Gone`): a
    /// Status without a code that says so would otherwise have the watch
    /// ask for the same old version for ever.
    fn gone(&self) -> bool {
        matches!(self, Error::Status(s) if s.code == Some(410)
            || (s.code.is_none_or(|c| c == 0)
                && matches!(s.reason.as_deref(), Some("Expired" | "Gone"))))
    }

    /// 404 with reason NotFound: no object of that name. A 404 without
    /// that reason (a proxy's page, a path the server does not serve) says
    /// nothing about the object, as kube's `get_opt` reads it too.
    fn not_found(&self) -> bool {
        matches!(self, Error::Status(s) if s.code == Some(404) && s.reason.as_deref() == Some("NotFound"))
    }
}

fn decode_error(what: &str, e: impl fmt::Display) -> Error {
    Error::Decode(format!("{what}: {e}"))
}

/// How one attempt that did not fail ended.
enum Ended {
    /// A complete list, at this resourceVersion.
    Listed(String),
    /// A watch the API server closed (or that went idle).
    Watched { delivered: bool },
}

/// How one request failed.
#[derive(Debug)]
pub enum Failed {
    /// The API server does not serve this kind in protobuf; the text says
    /// what it answered instead.
    Refused(String),
    Error(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Error(e)
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failed::Refused(answer) => write!(f, "the API server refused protobuf: {answer}"),
            Failed::Error(e) => write!(f, "{e}"),
        }
    }
}

/// Lists and watches the kind at `path` (a resource's URL, as
/// `Api::resource_url` gives it) with `config`'s selectors, handing every
/// event and every failure to `on`, until the API server refuses protobuf.
/// Returns what it answered instead. Failures are retried with backoff; a
/// 410 Gone starts a new list.
pub async fn run<K: Proto>(
    client: &Client,
    path: &str,
    config: &watcher::Config,
    on: &mut impl FnMut(Result<Event<K>, Error>),
) -> String {
    let mut failures = 0u32;
    let mut version: Option<String> = None;
    loop {
        let attempt = match &mut version {
            None => list(client, path, config, on).await.map(Ended::Listed),
            Some(v) => watch(client, path, config, v, &mut failures, on)
                .await
                .map(|delivered| Ended::Watched { delivered }),
        };
        match attempt {
            // `failures` goes back to 0 only when a watch delivers: a list
            // that succeeds before a watch that fails keeps backing off.
            Ok(Ended::Listed(listed)) => version = Some(listed),
            // The watch ended as watches do (its timeout): go on from
            // where it stopped.
            Ok(Ended::Watched { delivered: true }) => {}
            // It closed before anything came: wait as after a failure, so
            // a server that closes every watch at once is not asked again
            // in a tight loop.
            Ok(Ended::Watched { delivered: false }) => back_off(&mut failures).await,
            Err(Failed::Refused(why)) => return why,
            Err(Failed::Error(e)) => {
                if e.gone() {
                    version = None;
                }
                on(Err(e));
                back_off(&mut failures).await;
            }
        }
    }
}

/// The object `name` of the kind at `path` (a resource's URL, as
/// `Api::resource_url` gives it), read in protobuf: `None` when the API
/// server has none of that name. A refusal (406, or an answer in another
/// encoding) is `Failed::Refused`: the caller reads that kind as JSON.
pub async fn get<K: Proto>(client: &Client, path: &str, name: &str) -> Result<Option<K>, Failed> {
    let request = Request::new(path).get(name, &GetParams::default());
    let request = request.map_err(|e| Error::Http(kube::Error::BuildRequest(e)))?;
    let response = match send(client, request, MEDIA_TYPE).await {
        Ok(response) => response,
        Err(Failed::Error(e)) if e.not_found() => return Ok(None),
        Err(other) => return Err(other),
    };
    let body = response.into_body().collect().await.map_err(Error::Http)?;
    Ok(Some(decode(body.to_bytes())?))
}

/// Counts one more failure in a row and waits as [`RETRY`] says.
async fn back_off(failures: &mut u32) {
    *failures = failures.saturating_add(1);
    let wait = RETRY.jittered(*failures, |spread| rand::random_range(0..=spread));
    tokio::time::sleep(wait).await;
}

/// The whole list, page by page: `Init`, each object, `InitDone`. Returns
/// the list's resourceVersion.
async fn list<K: Proto>(
    client: &Client,
    path: &str,
    config: &watcher::Config,
    on: &mut impl FnMut(Result<Event<K>, Error>),
) -> Result<String, Failed> {
    let (resource_version, version_match) = match config.list_semantic {
        ListSemantic::Any => (Some("0".to_owned()), Some(VersionMatch::NotOlderThan)),
        ListSemantic::MostRecent => (None, None),
    };
    let mut params = ListParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        resource_version,
        version_match,
        limit: config.page_size,
        ..Default::default()
    };
    let mut first = true;
    loop {
        let request = Request::new(path).list(&params);
        let request = request.map_err(|e| Error::Http(kube::Error::BuildRequest(e)))?;
        let response = send(client, request, MEDIA_TYPE).await?;
        let body = response.into_body().collect().await.map_err(Error::Http)?;
        let raw = unwrap(body.to_bytes())?;
        let page = List::<K::Message>::decode(raw);
        let page = page.map_err(|e| decode_error("a list", e))?;
        if std::mem::take(&mut first) {
            on(Ok(Event::Init));
        }
        for item in page.items {
            on(Ok(Event::InitApply(K::from_message(item))));
        }
        let meta = page.metadata.unwrap_or_default();
        match meta.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => {
                // Without one no watch can follow the list (kube's watcher
                // lists again too).
                let version = meta.resource_version.filter(|v| !v.is_empty());
                let version =
                    version.ok_or_else(|| decode_error("a list", "no resourceVersion"))?;
                on(Ok(Event::InitDone));
                return Ok(version);
            }
        }
    }
}

/// One watch from `version`, which follows every event and bookmark. Ends
/// `Ok(delivered)`, whether anything came, when the API server closes the
/// stream, or when nothing, not even a bookmark, has come for longer than
/// the watch's own timeout (a connection that died without a reset).
async fn watch<K: Proto>(
    client: &Client,
    path: &str,
    config: &watcher::Config,
    version: &mut String,
    failures: &mut u32,
    on: &mut impl FnMut(Result<Event<K>, Error>),
) -> Result<bool, Failed> {
    let params = WatchParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        timeout: config.timeout,
        bookmarks: config.bookmarks,
        send_initial_events: false,
    };
    let request = Request::new(path).watch(&params, version);
    let request = request.map_err(|e| Error::Http(kube::Error::BuildRequest(e)))?;
    let accept = "application/vnd.kubernetes.protobuf;stream=watch";
    let mut body = send(client, request, accept).await?.into_body();
    let idle = Duration::from_secs(u64::from(config.timeout.unwrap_or(WATCH_TIMEOUT)) + 5);
    let mut buffer = BytesMut::new();
    let mut delivered = false;
    loop {
        while let Some(frame) = next_frame(&mut buffer)? {
            let event = WatchEvent::decode(frame).map_err(|e| decode_error("a watch event", e))?;
            let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
            let kind = event.type_.as_deref().unwrap_or_default();
            if kind == "ERROR" {
                let status = Status::decode(unwrap(raw)?);
                let status = status.map_err(|e| decode_error("a Status", e))?;
                return Err(Error::Status(status).into());
            }
            // An object that cannot be read is reported and skipped, as
            // kube's watcher skips a JSON line it cannot read: the stream
            // goes on.
            let object = match decode::<K>(raw) {
                Ok(object) => object,
                Err(e) => {
                    on(Err(e));
                    continue;
                }
            };
            keep_version(version, &object);
            (*failures, delivered) = (0, true);
            match kind {
                "ADDED" | "MODIFIED" => on(Ok(Event::Apply(object))),
                "DELETED" => on(Ok(Event::Delete(object))),
                "BOOKMARK" => {}
                other => on(Err(decode_error(
                    "a watch event",
                    format!("type {other:?}"),
                ))),
            }
        }
        match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    buffer.extend_from_slice(&data);
                }
            }
            Ok(Some(Err(e))) => return Err(Error::Http(e).into()),
            Ok(None) | Err(_) => return Ok(delivered),
        }
    }
}

/// One enveloped object: a GET's answer, or a watch event's object.
pub fn decode<K: Proto>(body: impl Into<Bytes>) -> Result<K, Error> {
    let message = K::Message::decode(unwrap(body.into())?);
    Ok(K::from_message(
        message.map_err(|e| decode_error("an object", e))?,
    ))
}

fn keep_version<K: Proto>(version: &mut String, object: &K) {
    if let Some(v) = object.resource_version().filter(|v| !v.is_empty()) {
        v.clone_into(version);
    }
}

/// The next complete frame of a watch stream (a 4-byte big-endian length,
/// then that many bytes), or `None` until more has arrived.
fn next_frame(buffer: &mut BytesMut) -> Result<Option<Bytes>, Error> {
    let Some(head) = buffer.get(..4) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if length > MAX_FRAME {
        let what = format!("a frame of {length} bytes (at most {MAX_FRAME})");
        return Err(decode_error("a watch stream", what));
    }
    if buffer.len() < 4 + length {
        return Ok(None);
    }
    buffer.advance(4);
    Ok(Some(buffer.split_to(length).freeze()))
}

/// The object inside the envelope: `k8s\0`, then a `runtime.Unknown`
/// holding it.
fn unwrap(body: Bytes) -> Result<Bytes, Error> {
    if !body.starts_with(MAGIC) {
        return Err(decode_error("an answer", "it does not start with k8s\\0"));
    }
    let unknown = Unknown::decode(body.slice(MAGIC.len()..));
    let unknown = unknown.map_err(|e| decode_error("the envelope", e))?;
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(decode_error(
            "the envelope",
            format!("content encoding {encoding:?}"),
        ));
    }
    Ok(unknown.raw.unwrap_or_default())
}

/// Sends `request` asking for `accept`. An error answer becomes its
/// Status; an answer in another encoding, or 406, is a refusal.
async fn send(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
    accept: &'static str,
) -> Result<Response<Body>, Failed> {
    let headers = request.headers_mut();
    headers.insert(ACCEPT, http::HeaderValue::from_static(accept));
    let response = client.send(request.map(Body::from)).await;
    let response = response.map_err(Error::Http)?;
    let status = response.status();
    let content_type = response.headers().get(CONTENT_TYPE);
    let content_type = content_type
        .and_then(|c| c.to_str().ok())
        .unwrap_or_default();
    let protobuf = content_type.starts_with(MEDIA_TYPE);
    if status == StatusCode::NOT_ACCEPTABLE {
        return Err(Failed::Refused(format!("{status} to Accept: {accept}")));
    }
    if status.is_success() {
        if !protobuf {
            return Err(Failed::Refused(format!("an answer in {content_type:?}")));
        }
        return Ok(response);
    }
    let body = response.into_body().collect().await.map_err(Error::Http)?;
    let body = body.to_bytes();
    let decoded = if protobuf {
        let raw = unwrap(body.clone()).ok();
        raw.and_then(|raw| Status::decode(raw).ok())
    } else {
        let json = serde_json::from_slice::<kube::core::Status>(&body).ok();
        json.map(|s| Status {
            message: Some(s.message),
            reason: Some(s.reason),
            code: Some(i32::from(s.code)),
        })
    };
    let text = || String::from_utf8_lossy(&body).chars().take(200).collect();
    let mut decoded = decoded.unwrap_or_else(|| Status {
        message: Some(text()),
        reason: None,
        code: None,
    });
    // A Status without a code (a proxy's `{}`) takes the answer's own.
    if decoded.code.is_none_or(|c| c == 0) {
        decoded.code = Some(i32::from(status.as_u16()));
    }
    Err(Error::Status(decoded).into())
}

#[cfg(test)]
mod tests;
