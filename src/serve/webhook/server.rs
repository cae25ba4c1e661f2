//! The webhook's HTTPS server, one route: `POST /mutate-node`. Every review
//! is answered with HTTP 200 and an AdmissionReview, whatever is wrong with
//! it; the handler never talks to the cluster.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use nodegate_actors::live::LiveConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::{Semaphore, watch};

use super::review;
use crate::error::{Error, Result};
use crate::serve::conn::{self, Limits, Refused};
use crate::serve::metrics::{AdmissionResult, Metrics};
use crate::serve::places::Place;

/// The one path the webhook serves.
pub const PATH: &str = "/mutate-node";
/// A Node object is far below this (a kubelet's registration is a few
/// KiB); anything larger is admitted unchanged without being read.
const MAX_BODY: usize = 1 << 20;
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A review's body must arrive whole within this: the API server sends it at
/// once, and a client that trickles one holds nothing but its connection.
const BODY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a review that was read waits for a place to be judged when
/// [`IN_FLIGHT`] are being judged, before it is admitted unchanged.
const JUDGE_WAIT: Duration = Duration::from_secs(1);
/// The bytes of all bodies being read or judged at once: what bounds their
/// memory, whatever the number of connections. A body waits for its bytes
/// (within [`BODY_TIMEOUT`]); a trickling client takes few.
const BODY_BUDGET: usize = 64 << 20;

/// The serving certificate, swappable while connections are being served:
/// each new handshake takes the one current then.
#[derive(Debug)]
pub struct CertSlot(ArcSwap<CertifiedKey>);

impl CertSlot {
    pub fn new(key: CertifiedKey) -> CertSlot {
        CertSlot(ArcSwap::from_pointee(key))
    }
    pub fn set(&self, key: CertifiedKey) {
        self.0.store(Arc::new(key));
    }
    /// The certificate new handshakes get now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.0.load_full()
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A PEM certificate chain and its PEM key as rustls serves them, with the
/// first certificate's notAfter (Unix seconds).
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<(CertifiedKey, i64), String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
    let first = chain
        .first()
        .ok_or("the certificate file holds no certificate")?;
    let (_, parsed) = x509_parser::parse_x509_certificate(first)
        .map_err(|e| format!("the certificate does not parse: {e}"))?;
    let not_after = parsed.validity().not_after.timestamp();
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("the key is not a PEM private key: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("the key cannot sign: {e}"))?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|e| format!("the key does not belong to the certificate: {e}"))?;
    Ok((certified, not_after))
}

/// What the handler reads.
pub struct Handler {
    /// The gate configuration in force: scope and managed taints.
    pub live: Arc<LiveConfig>,
    pub metrics: Arc<Metrics>,
    /// [`BODY_BUDGET`], shared by every connection.
    budget: Arc<Semaphore>,
    places: Arc<Semaphore>,
}

/// Reviews judged at once (each on a blocking thread). A review is read
/// first, without a place, so that slow clients cannot hold the places.
const IN_FLIGHT: usize = 16;

/// The bytes of a body not read whole that are kept to find its uid in.
const PREFIX: usize = 4 << 10;

/// Why a body was not read whole.
enum Unread {
    /// Over [`MAX_BODY`]: its first bytes.
    TooLarge(Vec<u8>),
    /// Not whole within [`BODY_TIMEOUT`] (or no bytes of the budget for it
    /// within that time): its first bytes.
    Slow(Vec<u8>),
    /// The connection failed while it was read.
    Broken(String),
}

/// A body read whole, with the bytes of the budget it holds until dropped.
struct Read {
    bytes: Vec<u8>,
    _budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Reads `body` whole if it is at most `max` bytes and arrives within
/// `within`, taking its bytes from `budget` as they come.
async fn read_capped(
    body: Body,
    max: usize,
    budget: Arc<Semaphore>,
    within: Duration,
) -> Result<Read, Unread> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    let deadline = tokio::time::Instant::now() + within;
    let prefix = |mut b: Vec<u8>| {
        b.truncate(PREFIX);
        b
    };
    loop {
        let next = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(next) => next,
            Err(_) => return Err(Unread::Slow(prefix(bytes))),
        };
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| Unread::Broken(e.to_string()))?;
        if bytes.len() + chunk.len() > max {
            let keep = PREFIX.saturating_sub(bytes.len()).min(chunk.len());
            bytes.extend_from_slice(&chunk[..keep]);
            return Err(Unread::TooLarge(prefix(bytes)));
        }
        // `max` is far below u32::MAX, so the chunk's size fits.
        let n = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
        let more = Arc::clone(&budget).acquire_many_owned(n);
        match tokio::time::timeout_at(deadline, more).await {
            Ok(Ok(p)) => match held.as_mut() {
                Some(h) => h.merge(p),
                None => held = Some(p),
            },
            _ => return Err(Unread::Slow(prefix(bytes))),
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Read {
        bytes,
        _budget: held,
    })
}

/// Allowed unchanged without being read, with a warning; the uid from the
/// first bytes so the API server takes the answer.
fn busy(prefix: &[u8], why: &str) -> review::Answer {
    let uid = review::parse::sniff_uid(prefix);
    let mut a = review::refuse_to_judge(uid, why.to_string());
    a.result = AdmissionResult::Busy;
    a
}

impl Handler {
    pub fn new(live: Arc<LiveConfig>, metrics: Arc<Metrics>) -> Handler {
        Handler {
            live,
            metrics,
            budget: Arc::new(Semaphore::new(BODY_BUDGET)),
            places: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() != PATH {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: the webhook serves /mutate-node\n",
            );
        }
        if req.method() != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview\n");
        }
        let started = Instant::now();
        let answer = self.read_and_answer(req.into_body()).await;
        self.metrics
            .entrances
            .admission(answer.result, started.elapsed().as_secs_f64());
        log(&answer);
        let text = serde_json::to_vec(&answer.body).unwrap_or_default();
        let mut response = Response::new(Body::from(text));
        let json = header::HeaderValue::from_static("application/json");
        response.headers_mut().insert(header::CONTENT_TYPE, json);
        response
    }

    /// The answer; judged on a blocking thread, off the runtime's workers.
    async fn read_and_answer(&self, body: Incoming) -> review::Answer {
        let budget = Arc::clone(&self.budget);
        let read = match read_capped(Body::new(body), MAX_BODY, budget, BODY_TIMEOUT).await {
            Ok(r) => r,
            Err(Unread::TooLarge(prefix)) => {
                let why = format!("the body is over {MAX_BODY} bytes, not a Node review");
                return busy(&prefix, &why);
            }
            Err(Unread::Slow(prefix)) => {
                let why = format!("the body did not arrive whole within {BODY_TIMEOUT:?}");
                return busy(&prefix, &why);
            }
            Err(Unread::Broken(why)) => return review::unreadable(why),
        };
        let Ok(Ok(_place)) = tokio::time::timeout(JUDGE_WAIT, self.places.acquire()).await else {
            let why =
                format!("the webhook was judging {IN_FLIGHT} reviews at once for {JUDGE_WAIT:?}");
            return busy(&read.bytes, &why);
        };
        let bytes = read.bytes;
        let config = self.live.load();
        let hold = match self.metrics.leadership.leader_known() {
            _ if config.dry_run => review::Hold::DryRun,
            Err(why) => review::Hold::NoLeader(why),
            Ok(()) => review::Hold::No,
        };
        let judged = tokio::task::spawn_blocking(move || {
            let managed = &config.placement.managed_taints;
            review::answer_held(&bytes, &config.scope, managed, &config.startup, &hold)
        })
        .await;
        judged.unwrap_or_else(|e| review::unreadable(format!("judging it failed: {e}")))
    }
}

/// One line per review; every text from the review is escaped already
/// (`review::parse::clean`), and is logged as a field besides.
fn log(answer: &review::Answer) {
    let node = answer.node.as_deref().unwrap_or("?");
    let note = answer.note.as_deref().unwrap_or("");
    match answer.result {
        AdmissionResult::Tainted => tracing::info!(node, note, "webhook: tainted"),
        AdmissionResult::Unchanged => tracing::debug!(node, note, "webhook: unchanged"),
        AdmissionResult::WouldTaint => tracing::info!(node, note, "webhook: dry run"),
        AdmissionResult::NoLeader => {
            tracing::warn!(node, note, "webhook: admitted unchanged, no leader")
        }
        AdmissionResult::Error | AdmissionResult::Busy => {
            tracing::warn!(note, "webhook: admitted unchanged")
        }
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r
}

/// Binds `addr` and serves the webhook until `shutdown` changes; returns
/// once bound, with the address actually bound.
pub async fn serve(
    addr: SocketAddr,
    slot: Arc<CertSlot>,
    handler: Arc<Handler>,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Invalid {
            what: "the webhook's TLS settings".into(),
            why: e.to_string(),
        })?
        .with_no_client_auth()
        .with_cert_resolver(slot);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (listener, bound) = conn::bind(addr, "--webhook-addr").await?;
    tracing::info!("webhook listening on {bound}");
    let limits = Limits::DEFAULT;
    let refused = Arc::new(Refused::default());
    let task = tokio::spawn(conn::accept_loop(
        listener,
        limits,
        "webhook",
        refused,
        shutdown,
        move |tcp, place| serve_one(tcp, place, acceptor.clone(), Arc::clone(&handler), limits),
    ));
    Ok((bound, task))
}

/// One connection: the TLS handshake, then HTTP/1.1 within `limits`.
async fn serve_one(
    tcp: tokio::net::TcpStream,
    place: Place,
    acceptor: tokio_rustls::TlsAcceptor,
    handler: Arc<Handler>,
    limits: Limits,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            tracing::debug!(%error, "webhook: TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let answer = move |req| Arc::clone(&handler).handle(req);
    let late = || {
        plain(
            StatusCode::REQUEST_TIMEOUT,
            "the review was not sent whole in time\n",
        )
    };
    if let Err(error) = conn::serve_http(tls, place, limits, answer, late).await {
        tracing::debug!(%error, "webhook: connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(BODY_BUDGET))
    }

    #[tokio::test]
    async fn a_body_over_the_bound_is_not_read_and_keeps_its_first_bytes() {
        let small = br#"{"request":{"uid":"u-1"}}"#.to_vec();
        let read = read_capped(Body::from(small.clone()), 64, budget(), BODY_TIMEOUT).await;
        assert!(matches!(&read, Ok(r) if r.bytes == small));

        let mut big = br#"{"request":{"uid":"u-2","x":["#.to_vec();
        big.extend(std::iter::repeat_n(b'0', 3 << 20));
        match read_capped(Body::from(big), MAX_BODY, budget(), BODY_TIMEOUT).await {
            Err(Unread::TooLarge(prefix)) => {
                assert_eq!(prefix.len(), PREFIX);
                let a = busy(&prefix, "too large");
                assert_eq!(a.result, AdmissionResult::Busy);
                assert_eq!(a.body["response"]["uid"], "u-2", "{}", a.body);
                assert_eq!(a.body["response"]["allowed"], true, "{}", a.body);
                assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
            }
            Ok(r) => panic!("read {} bytes over the bound", r.bytes.len()),
            Err(Unread::Slow(_)) => panic!("a body sent whole was slow"),
            Err(Unread::Broken(why)) => panic!("{why}"),
        }
    }

    /// A body that trickles is given up after the timeout with its first
    /// bytes, and gives back the budget it took; the budget bounds the
    /// bytes of every body being read at once.
    #[tokio::test]
    async fn a_trickling_body_is_given_up_and_the_budget_bounds_every_body() {
        let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
        let slow = Body::from_stream(rx);
        tx.try_send(Ok(br#"{"request":{"uid":"u-3","#.to_vec()))
            .expect("room for the first chunk");
        let shared = Arc::new(Semaphore::new(1024));
        let started = tokio::time::Instant::now();
        match read_capped(
            slow,
            MAX_BODY,
            Arc::clone(&shared),
            Duration::from_millis(200),
        )
        .await
        {
            Err(Unread::Slow(prefix)) => {
                assert_eq!(busy(&prefix, "slow").body["response"]["uid"], "u-3");
            }
            Ok(_) => panic!("a body that never ended was read whole"),
            Err(_) => panic!("a slow body is Slow"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(shared.available_permits(), 1024, "the budget came back");
        drop(tx);

        // Two bodies of 600 bytes against a budget of 1,000: while the first
        // is held, the second waits for bytes and is given up.
        let first = read_capped(
            Body::from(vec![b' '; 600]),
            MAX_BODY,
            Arc::clone(&shared),
            BODY_TIMEOUT,
        )
        .await
        .ok()
        .expect("the first fits");
        let tight = Arc::new(Semaphore::new(1000));
        let held = read_capped(
            Body::from(vec![b' '; 600]),
            MAX_BODY,
            Arc::clone(&tight),
            BODY_TIMEOUT,
        )
        .await
        .ok()
        .expect("fits the budget");
        let second = read_capped(
            Body::from(vec![b' '; 600]),
            MAX_BODY,
            Arc::clone(&tight),
            Duration::from_millis(100),
        )
        .await;
        assert!(matches!(second, Err(Unread::Slow(_))), "over the budget");
        drop(held);
        assert!(
            read_capped(Body::from(vec![b' '; 600]), MAX_BODY, tight, BODY_TIMEOUT)
                .await
                .is_ok(),
            "the budget came back when the first was dropped"
        );
        drop(first);
    }
}
