//! The webhook's HTTPS server: TLS by rustls (ring) with a certificate that
//! can be swapped while it serves ([`CertSlot`]), HTTP/1.1 by hyper, and one
//! route, `POST /mutate-node`, answered by `review::answer`.
//!
//! Every review is answered with HTTP 200 and an AdmissionReview, whatever
//! is wrong with it; other paths get 404. The handler reads settings and
//! bumps counters: it never talks to the cluster, so its latency is the
//! JSON work alone.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use nodegate_actors::live::LiveConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::review;
use crate::error::{Error, Result};
use crate::serve::metrics::{AdmissionResult, Metrics};

/// The one path the webhook serves.
pub const PATH: &str = "/mutate-node";
/// A Node object is far below this; anything larger is not a review.
const MAX_BODY: usize = 3 << 20;
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
        Some(self.0.load_full())
    }
}

/// A PEM certificate chain and its PEM key as rustls serves them, with the
/// first certificate's notAfter (Unix seconds). The error says what is
/// wrong, for a person.
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
}

impl Handler {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() != PATH {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: the webhook serves /mutate-node\n",
            );
        }
        if req.method() != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview\n");
        }
        let body = axum::body::to_bytes(Body::new(req.into_body()), MAX_BODY).await;
        let started = Instant::now();
        let answer = match body {
            Ok(bytes) => {
                let config = self.live.load();
                let managed = &config.placement.managed_taints;
                review::answer(&bytes, &config.scope, managed, config.dry_run)
            }
            Err(e) => review::unreadable(e.to_string()),
        };
        let text = serde_json::to_vec(&answer.body).unwrap_or_default();
        self.metrics
            .webhook_admission(answer.result, started.elapsed().as_secs_f64());
        let node = answer.node.as_deref().unwrap_or("?");
        let note = answer.note.as_deref().unwrap_or("");
        match answer.result {
            AdmissionResult::Tainted => tracing::info!(node, "webhook: {note}"),
            AdmissionResult::Unchanged => tracing::debug!(node, "webhook: unchanged, {note}"),
            AdmissionResult::WouldTaint => tracing::info!(node, "webhook: dry run, {note}"),
            AdmissionResult::Error => tracing::warn!("webhook: admitted unchanged: {note}"),
        }
        let mut response = Response::new(Body::from(text));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        response
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(text));
    *r.status_mut() = status;
    r
}

/// Binds `addr` and serves the webhook until `shutdown` changes; returns
/// once bound, with the address actually bound (logged as `webhook
/// listening on ADDR`).
pub async fn serve(
    addr: SocketAddr,
    slot: Arc<CertSlot>,
    handler: Arc<Handler>,
    mut shutdown: watch::Receiver<bool>,
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
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(Error::io(format!(
            "cannot listen on {addr} (--webhook-addr)"
        )))?;
    let bound = listener.local_addr().map_err(Error::io(format!(
        "cannot read the address bound for {addr}"
    )))?;
    tracing::info!("webhook listening on {bound}");
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.changed() => break,
            };
            let (tcp, _) = match accepted {
                Ok(c) => c,
                Err(error) => {
                    // Out of file descriptors and the like: wait, retry.
                    tracing::warn!(%error, "webhook: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let handler = Arc::clone(&handler);
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "webhook: TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
                let service = hyper::service::service_fn(move |req| {
                    let handler = Arc::clone(&handler);
                    async move { Ok::<_, Infallible>(handler.handle(req).await) }
                });
                if let Err(error) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%error, "webhook: connection ended with an error");
                }
            });
        }
    });
    Ok((bound, task))
}
