//! The bounds every listener of `nodegate run` shares. Besides the total
//! cap, a cap per remote address keeps one pod from taking every place;
//! loopback connections (the pod's own, such as `nodegate probe`) count
//! against neither and have [`Limits::loopback_reserve`] places beyond them,
//! so no remote client can starve the probes. A connection beyond a cap is
//! accepted and closed at once: it costs nothing but the accept.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// How much one listener admits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections at once from remote addresses.
    pub max_connections: usize,
    /// Connections at once from one remote address.
    pub max_per_peer: usize,
    /// Places for loopback connections beyond `max_connections`.
    pub loopback_reserve: usize,
    /// Whether loopback connections are exempt from the caps (always, but
    /// for tests that need two distinct peers on one machine).
    pub loopback_exempt: bool,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
}

impl Limits {
    /// The bounds of every listener. The head timeout is short: the API
    /// server and the kubelet send a head at once, and a client that trickles
    /// one holds a place only that long.
    pub const DEFAULT: Limits = Limits {
        max_connections: 1024,
        max_per_peer: 64,
        loopback_reserve: 64,
        loopback_exempt: true,
        header_read_timeout: Duration::from_secs(3),
        request_timeout: Duration::from_secs(10),
    };
}

/// The places taken, by remote address and in all.
#[derive(Debug, Default)]
struct Taken {
    remote: usize,
    loopback: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// A place held by one connection, given back on drop.
struct Place {
    taken: Arc<Mutex<Taken>>,
    peer: Option<IpAddr>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let Ok(mut t) = self.taken.lock() else { return };
        match self.peer {
            None => t.loopback = t.loopback.saturating_sub(1),
            Some(ip) => {
                t.remote = t.remote.saturating_sub(1);
                if let Some(n) = t.by_peer.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        t.by_peer.remove(&ip);
                    }
                }
            }
        }
    }
}

/// A place for a connection from `peer`, or why there is none.
fn take_place(
    taken: &Arc<Mutex<Taken>>,
    limits: &Limits,
    peer: IpAddr,
) -> Result<Place, &'static str> {
    let mut t = taken
        .lock()
        .map_err(|_| "the listener's count is poisoned")?;
    let loopback = limits.loopback_exempt && peer.to_canonical().is_loopback();
    let peer = if loopback {
        if t.loopback >= limits.loopback_reserve + limits.max_connections.saturating_sub(t.remote) {
            return Err("too many connections at once");
        }
        t.loopback += 1;
        None
    } else {
        if t.remote + t.loopback.saturating_sub(limits.loopback_reserve) >= limits.max_connections {
            return Err("too many connections at once");
        }
        let n = t.by_peer.entry(peer).or_insert(0);
        if *n >= limits.max_per_peer {
            return Err("too many connections from one address");
        }
        *n += 1;
        t.remote += 1;
        Some(peer)
    };
    let taken = Arc::clone(taken);
    Ok(Place { taken, peer })
}

/// Serves HTTP/1.1 on `io`: `answer` to each request, or `late()` when that
/// takes longer than the request timeout; the error that ended the
/// connection, if any. hyper's timeouts do nothing without its timer; the
/// head timeout is also how long a kept-alive connection may sit idle.
pub async fn serve_http<I, A, F>(
    io: I,
    limits: Limits,
    answer: A,
    late: fn() -> Response<Body>,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    A: Fn(Request<Incoming>) -> F,
    F: Future<Output = Response<Body>>,
{
    let service = hyper::service::service_fn(move |req| {
        let answer = tokio::time::timeout(limits.request_timeout, answer(req));
        async move { Ok::<_, Infallible>(answer.await.unwrap_or_else(|_| late())) }
    });
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    b.serve_connection(io, service).await
}

/// Binds `addr` (`flag` names it in the error): the listener, and the
/// address actually bound (port 0 → a free port).
pub async fn bind(addr: SocketAddr, flag: &str) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(Error::io(format!("cannot listen on {addr} ({flag})")))?;
    let bound = listener.local_addr().map_err(Error::io(format!(
        "cannot read the address bound for {addr}"
    )))?;
    Ok((listener, bound))
}

/// Connections refused because the listener was full, since start.
#[derive(Debug, Default)]
pub struct Refused(AtomicU64);

impl Refused {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Accepts connections until `shutdown` changes and runs `serve` on each
/// within `limits`; one beyond them is closed at once and counted in `refused`.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    limits: Limits,
    what: &'static str,
    refused: Arc<Refused>,
    mut shutdown: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let taken = Arc::new(Mutex::new(Taken::default()));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait, retry.
                tracing::warn!(%error, "{what}: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let place = match take_place(&taken, &limits, peer.ip()) {
            Ok(place) => place,
            Err(why) => {
                let before = refused.0.fetch_add(1, Ordering::Relaxed);
                if before.is_multiple_of(1000) {
                    tracing::warn!(
                        max = limits.max_connections,
                        max_per_peer = limits.max_per_peer,
                        %peer,
                        refused = refused.get(),
                        "{what}: {why}; closing new ones"
                    );
                }
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let conn = serve(tcp);
        tokio::spawn(async move {
            conn.await;
            drop(place);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP address")
    }

    #[test]
    fn one_peer_cannot_take_every_place_and_loopback_always_has_one() {
        let limits = Limits {
            max_connections: 6,
            max_per_peer: 2,
            loopback_reserve: 1,
            ..Limits::DEFAULT
        };
        let taken = Arc::new(Mutex::new(Taken::default()));
        let mut held = Vec::new();
        // One pod: two places, then refused; others still get theirs.
        for _ in 0..2 {
            held.push(take_place(&taken, &limits, ip("10.0.0.9")).expect("within the peer cap"));
        }
        assert_eq!(
            take_place(&taken, &limits, ip("10.0.0.9")).err(),
            Some("too many connections from one address")
        );
        for peer in ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"] {
            held.push(take_place(&taken, &limits, ip(peer)).expect("within the caps"));
        }
        // Every remote place is taken: a new address is refused, the pod's
        // own loopback (the probe) is not, up to the reserve.
        assert_eq!(
            take_place(&taken, &limits, ip("10.0.0.3")).err(),
            Some("too many connections at once")
        );
        let probe = take_place(&taken, &limits, ip("127.0.0.1")).expect("the reserve");
        assert!(
            take_place(&taken, &limits, ip("::1")).is_err(),
            "beyond the reserve"
        );
        // Places come back on drop.
        drop(probe);
        held.truncate(1);
        assert!(take_place(&taken, &limits, ip("10.0.0.3")).is_ok());
        let t = taken.lock().expect("lock");
        assert_eq!((t.remote, t.loopback), (1, 0), "{t:?}");
        assert_eq!(t.by_peer.get(&ip("10.0.0.9")), Some(&1), "{t:?}");
    }

    #[tokio::test]
    async fn a_connection_beyond_the_cap_is_closed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 2,
            loopback_exempt: false,
            ..Limits::DEFAULT
        };
        let refused = Arc::new(Refused::default());
        let (_stop, shutdown) = watch::channel(false);
        let held = Arc::new(tokio::sync::Notify::new());
        let release = Arc::clone(&held);
        tokio::spawn(accept_loop(
            listener,
            limits,
            "test",
            Arc::clone(&refused),
            shutdown,
            move |tcp| {
                let release = Arc::clone(&release);
                async move {
                    release.notified().await;
                    drop(tcp);
                }
            },
        ));
        let mut within = Vec::new();
        for _ in 0..2 {
            within.push(TcpStream::connect(addr).await.expect("connect"));
        }
        let mut beyond = TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), beyond.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the third connection is closed: {read:?}"
        );
        assert_eq!(refused.get(), 1);
        // Those within the cap are still open.
        let open = tokio::time::timeout(Duration::from_millis(50), within[0].read(&mut buf)).await;
        assert!(open.is_err(), "still open: {open:?}");
        held.notify_waiters();
    }
}
