//! The bounds every listener of `nodegate run` shares (`--http-addr` and
//! the webhook): at most [`Limits::max_connections`] connections at once
//! (one more is accepted and closed at once, so it costs nothing but the
//! accept), and hyper's timer, without which its timeouts do nothing: the
//! request head must arrive within [`Limits::header_read_timeout`] of the
//! connection being ready for it — which is also how long a kept-alive
//! connection may sit idle — and a request is answered or dropped within
//! [`Limits::request_timeout`] (the handlers bound that themselves).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

/// How much one listener admits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
}

impl Limits {
    /// The bounds of `--http-addr` and of the webhook.
    pub const DEFAULT: Limits = Limits {
        max_connections: 1024,
        header_read_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    };
}

/// An HTTP/1.1 connection builder with the timer and the head timeout of
/// `limits`.
pub fn http1(limits: &Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    b
}

/// Connections refused because the listener was full, since start.
#[derive(Debug, Default)]
pub struct Refused(AtomicU64);

impl Refused {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Accepts connections on `listener` until `shutdown` changes and runs
/// `serve` on each, at most `limits.max_connections` at once; one beyond is
/// closed at once and counted in `refused`.
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
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                // Out of file descriptors and the like: wait, retry.
                tracing::warn!(%error, "{what}: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            if refused
                .0
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(1000)
            {
                tracing::warn!(
                    max = limits.max_connections,
                    refused = refused.get(),
                    "{what}: too many connections at once; closing new ones"
                );
            }
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let conn = serve(tcp);
        tokio::spawn(async move {
            conn.await;
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_connection_beyond_the_cap_is_closed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 2,
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
