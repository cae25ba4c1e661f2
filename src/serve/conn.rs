//! One connection of a listener of `nodegate run`, from its accept to its
//! end: the listener's caps ([`places`](super::places)), then the clocks
//! on its head, its answers, its writes and its idle spells.

use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::error::{Error, Result};
use crate::serve::places::{Book, Caps, Displaced, Place};

/// How much one listener admits, and how long a connection may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How many connections at once.
    pub caps: Caps,
    /// How long a request head may take, from a new connection's start or
    /// from the first byte of the next head on a kept-alive one.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may sit between an answer and the
    /// next request's first byte.
    pub idle_timeout: Duration,
    /// How long an answer may take, and a write of it wait on the client.
    pub request_timeout: Duration,
}

impl Limits {
    /// The bounds of every listener. The head timeout is short: the API
    /// server and the kubelet send a head at once, and a client that trickles
    /// one holds a place only that long. The idle timeout is longer than the
    /// API server keeps an idle connection to reuse (90 s, Go's default):
    /// a listener that closed first could close a connection just as a
    /// review is sent on it, and that review would fail.
    pub const DEFAULT: Limits = Limits {
        caps: Caps::DEFAULT,
        header_read_timeout: Duration::from_secs(3),
        idle_timeout: Duration::from_secs(120),
        request_timeout: Duration::from_secs(10),
    };
}

/// Serves HTTP/1.1 on `io`, which holds `place`: `answer` to each request,
/// or `late()` when that takes longer than the request timeout; the error
/// that ended the connection, if any. An idle connection that gives its
/// place to a newer one closes, once it has answered a request already
/// sent, if there is one. The head and idle timeouts are kept by
/// [`Clocked`] on `io`'s reads, not by hyper: hyper's head timeout starts as
/// soon as it waits for the next head, so it would also be the idle limit.
pub async fn serve_http<I, A, F>(
    io: I,
    place: Place,
    limits: Limits,
    answer: A,
    late: fn() -> Response<Body>,
) -> hyper::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin,
    A: Fn(Request<Incoming>) -> F,
    F: Future<Output = Response<Body>>,
{
    let turns = Arc::new(Turns::default());
    let place = Arc::new(place);
    let (seen, held) = (Arc::clone(&turns), Arc::clone(&place));
    let service = hyper::service::service_fn(move |req| {
        // Busy from here (hyper may take a request it read ahead, with no
        // read of ours in between).
        held.idle(None);
        seen.heads.fetch_add(1, Ordering::AcqRel);
        let answer = tokio::time::timeout(limits.request_timeout, answer(req));
        let (seen, held) = (Arc::clone(&seen), Arc::clone(&held));
        async move {
            let mut response = answer.await.unwrap_or_else(|_| late());
            if held.was_given() {
                // Its place was given away: this answer is its last.
                let close = http::HeaderValue::from_static("close");
                response
                    .headers_mut()
                    .insert(http::header::CONNECTION, close);
            }
            let answered = response.map(|body| Body::new(Answered { body, turns: seen }));
            Ok::<_, Infallible>(answered)
        }
    });
    let io = TokioIo::new(Clocked::new(io, place, turns, limits));
    http1::Builder::new()
        .keep_alive(true)
        .max_buf_size(READ_BUFFER)
        .serve_connection(io, service)
        .await
}

/// The most a connection reads ahead of its handler (hyper's default is
/// about 400 KiB): a head larger is refused, and a connection kept alive
/// after a large body keeps a buffer of this order, not of that one.
pub const READ_BUFFER: usize = 64 << 10;

/// Requests of one connection whose head was read, and those answered.
#[derive(Debug, Default)]
struct Turns {
    heads: AtomicU64,
    /// Answers whose body hyper has taken to its end (or dropped).
    answers: AtomicU64,
}

/// An answer's body, counted in [`Turns::answers`] when hyper drops it,
/// having taken its last part (the flush that follows writes it out), not
/// when the handler returns.
struct Answered {
    body: Body,
    turns: Arc<Turns>,
}

impl hyper::body::Body for Answered {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.turns.answers.fetch_add(1, Ordering::AcqRel);
    }
}

/// Where a connection is between requests, as its reads see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A head is awaited and must be whole by the clock.
    Head,
    /// A request is being answered: the request timeout bounds it.
    Answering,
    /// Answered; the next head's first byte is awaited until the clock.
    Idle,
}

/// A connection's stream with the listener's clocks on its reads: a head
/// must be whole within the head timeout (from the connection's start, or
/// from the first byte read after an answer), and a kept-alive connection
/// may sit idle for the idle timeout. A read past either clock fails with
/// `TimedOut`, which ends the connection; an idle one whose place was given
/// to another reads the end of the stream.
struct Clocked<I> {
    io: I,
    place: Arc<Place>,
    turns: Arc<Turns>,
    heads_seen: u64,
    phase: Phase,
    /// Whether a write waits on the client (see `write_clock`).
    stalled: bool,
    clock: Pin<Box<Sleep>>,
    limits: Limits,
}

impl<I> Clocked<I> {
    fn new(io: I, place: Arc<Place>, turns: Arc<Turns>, limits: Limits) -> Self {
        let clock = Box::pin(tokio::time::sleep(limits.header_read_timeout));
        Clocked {
            io,
            place,
            turns,
            heads_seen: 0,
            phase: Phase::Head,
            stalled: false,
            clock,
            limits,
        }
    }

    /// Follows the service: a head taken starts an answer.
    fn follow(&mut self) {
        let heads = self.turns.heads.load(Ordering::Acquire);
        if heads != self.heads_seen {
            self.heads_seen = heads;
            self.phase = Phase::Answering;
        }
    }

    /// Bounds a write that waits on the client: the first that waits, while
    /// an answer is under way, sets the clock to the request timeout (the
    /// head and idle clocks bound the other phases); any progress stops it.
    fn write_clock<T>(
        &mut self,
        cx: &mut Context<'_>,
        done: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if done.is_ready() {
            self.stalled = false;
            return done;
        }
        if self.phase == Phase::Answering && !self.stalled {
            self.stalled = true;
            let until = Instant::now() + self.limits.request_timeout;
            self.clock.as_mut().reset(until);
        }
        if self.clock.as_mut().poll(cx).is_ready() {
            let why = "the client did not read its answer in time";
            return Poll::Ready(Err(std::io::Error::new(ErrorKind::TimedOut, why)));
        }
        Poll::Pending
    }

    /// After a flush that wrote everything: when every request taken has
    /// its body written whole, the connection is idle. Only here: hyper
    /// reads (to see an early end) while an answer is still being written.
    /// hyper may not read again until woken, so the clock, and the loss of
    /// the place, are set to wake this task here.
    fn flushed(&mut self, cx: &mut Context<'_>) {
        self.follow();
        if self.phase != Phase::Answering
            || self.turns.answers.load(Ordering::Acquire) != self.heads_seen
        {
            return;
        }
        self.phase = Phase::Idle;
        let now = Instant::now();
        self.place.idle(Some(now));
        self.clock.as_mut().reset(now + self.limits.idle_timeout);
        let _ = self.clock.as_mut().poll(cx);
        if self.place.given(cx) {
            // Given away as it turned idle: read now whether a request is
            // there to answer (with the connection's last answer) or not.
            cx.waker().wake_by_ref();
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Clocked<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.follow();
        // An idle connection whose place was given away ends, unless a
        // request is already there to read: it is answered, and its answer
        // closes the connection (`Connection: close`).
        let given = this.phase == Phase::Idle && this.place.given(cx);
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.phase == Phase::Idle && buf.filled().len() > before {
                    this.phase = Phase::Head;
                    this.place.idle(None);
                    let until = Instant::now() + this.limits.header_read_timeout;
                    this.clock.as_mut().reset(until);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending if given => Poll::Ready(Ok(())),
            Poll::Pending => {
                if this.phase != Phase::Answering && this.clock.as_mut().poll(cx).is_ready() {
                    let why = match this.phase {
                        Phase::Idle => "the connection was idle too long",
                        _ => "no whole request head in time",
                    };
                    return Poll::Ready(Err(std::io::Error::new(ErrorKind::TimedOut, why)));
                }
                Poll::Pending
            }
        }
    }
}

/// A connection turns idle when its answer is flushed ([`Clocked::flushed`]).
/// A write that makes no progress for the request timeout (a client that
/// stopped reading its answer) fails with `TimedOut`, ending the connection.
impl<I: AsyncWrite + Unpin> AsyncWrite for Clocked<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.write_clock(cx, written)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        let flushed = this.write_clock(cx, flushed);
        if let Poll::Ready(Ok(())) = flushed {
            this.flushed(cx);
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.write_clock(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
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
/// within `limits`, with its place; one beyond them (when no idle connection
/// gives it its place) is closed at once and counted in `refused`.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    limits: Limits,
    what: &'static str,
    refused: Arc<Refused>,
    mut shutdown: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(TcpStream, Place) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let book = Book::new(limits.caps);
    let mut displaced = 0u64;
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
        let place = match book.take(peer.ip()) {
            Ok((place, None)) => place,
            Ok((
                place,
                Some(Displaced {
                    peer: from,
                    idle_since,
                }),
            )) => {
                if displaced.is_multiple_of(1000) {
                    tracing::warn!(
                        max = book.caps().max_connections,
                        max_per_peer = book.caps().max_per_peer,
                        %peer,
                        %from,
                        idle_s = idle_since.elapsed().as_secs(),
                        displaced = displaced + 1,
                        "{what}: full; closing idle connections of the addresses holding the most for new ones"
                    );
                }
                displaced += 1;
                place
            }
            Err(why) => {
                let before = refused.0.fetch_add(1, Ordering::Relaxed);
                if before.is_multiple_of(1000) {
                    tracing::warn!(
                        max = book.caps().max_connections,
                        max_per_peer = book.caps().max_per_peer,
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
        tokio::spawn(serve(tcp, place));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::places::FULL;
    use std::net::IpAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP address")
    }

    /// A listener of one place, held by a connection from 10.0.0.1 served
    /// in memory (`body` answers each request); the client's end.
    fn one_place(
        book: &Book,
        limits: Limits,
        buffer: usize,
        body: &'static str,
    ) -> tokio::io::DuplexStream {
        let answer = move |_req| async move { Response::new(Body::from(body)) };
        one_place_answering(book, limits, buffer, answer)
    }

    /// The same, answering with `answer`.
    fn one_place_answering<A, F>(
        book: &Book,
        limits: Limits,
        buffer: usize,
        answer: A,
    ) -> tokio::io::DuplexStream
    where
        A: Fn(Request<Incoming>) -> F + Send + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let (place, _) = book.take(ip("10.0.0.1")).expect("a place");
        let (client, server) = tokio::io::duplex(buffer);
        let late = || Response::new(Body::from("late"));
        tokio::spawn(serve_http(server, place, limits, answer, late));
        client
    }

    const ONE_PLACE: Limits = Limits {
        caps: Caps {
            max_connections: 1,
            loopback_exempt: false,
            ..Caps::DEFAULT
        },
        ..Limits::DEFAULT
    };

    #[tokio::test]
    async fn a_request_already_sent_when_the_place_is_given_is_answered_then_the_end() {
        let book = Book::new(ONE_PLACE.caps);
        let mut client = one_place(&book, ONE_PLACE, 4096, "ok");
        client.write_all(GET).await.expect("write");
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
        // The next requests (pipelined) are on their way as a newcomer takes
        // the place (the server's task has not run since: one thread).
        client.write_all(&GET.repeat(3)).await.expect("write");
        let (_newcomer, displaced) = book.take(ip("10.0.0.1")).expect("the idle place");
        assert!(displaced.is_some());
        // One is answered, as the connection's last; then the end.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest));
        assert!(matches!(read.await, Ok(Ok(_))), "not closed");
        let rest = String::from_utf8_lossy(&rest);
        assert_eq!(rest.matches("HTTP/1.1 200").count(), 1, "{rest}");
        assert!(rest.contains("connection: close"), "{rest}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_its_answer_is_cut_after_the_request_timeout() {
        const BIG: &str = concat!(include_str!("conn.rs"), include_str!("conn.rs"));
        let book = Book::new(ONE_PLACE.caps);
        let (place, _) = book.take(ip("10.0.0.1")).expect("a place");
        let (mut client, server) = tokio::io::duplex(1024);
        let answer = |_req| async { Response::new(Body::from(BIG)) };
        let late = || Response::new(Body::from("late"));
        let served = tokio::spawn(serve_http(server, place, ONE_PLACE, answer, late));
        client.write_all(GET).await.expect("write");
        // Never read: the answer fills the pipe and its write waits.
        let timeout = ONE_PLACE.request_timeout;
        let ended = tokio::time::timeout(timeout * 3, served).await;
        assert!(
            matches!(ended, Ok(Ok(Err(_)))),
            "a connection whose client stopped reading was not ended: {ended:?}"
        );
        assert_eq!(book.held(), 0, "its place was not given back");
    }

    #[tokio::test]
    async fn a_streamed_answer_keeps_its_place_until_its_last_part() {
        use futures::StreamExt;
        let book = Book::new(ONE_PLACE.caps);
        let rest = Arc::new(tokio::sync::Notify::new());
        let release = Arc::clone(&rest);
        let respond = move |_req| {
            let release = Arc::clone(&release);
            async move {
                let first =
                    futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from("first "))]);
                let last = futures::stream::once(async move {
                    release.notified().await;
                    Ok(bytes::Bytes::from("last"))
                });
                Response::new(Body::from_stream(first.chain(last)))
            }
        };
        let mut client = one_place_answering(&book, ONE_PLACE, 4096, respond);
        client.write_all(GET).await.expect("write");
        // The head and the first part are written and flushed.
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !String::from_utf8_lossy(&got).contains("first ") {
            let n = client.read(&mut buf).await.expect("read");
            assert_ne!(n, 0, "closed: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            book.take(ip("10.0.0.1")).err(),
            Some(FULL),
            "the place of a connection still streaming its answer was given"
        );
        rest.notify_one();
        while !got.ends_with(b"0\r\n\r\n") {
            let n = client.read(&mut buf).await.expect("read");
            assert_ne!(
                n,
                0,
                "the answer was cut: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        assert!(String::from_utf8_lossy(&got).contains("last"));
    }

    #[tokio::test]
    async fn a_request_read_ahead_keeps_its_place_while_it_is_answered() {
        let book = Book::new(ONE_PLACE.caps);
        let second = Arc::new(tokio::sync::Notify::new());
        let (count, release) = (Arc::new(AtomicU64::new(0)), Arc::clone(&second));
        let respond = move |_req| {
            let (n, release) = (count.fetch_add(1, Ordering::AcqRel), Arc::clone(&release));
            async move {
                if n == 1 {
                    release.notified().await;
                }
                Response::new(Body::from("ok"))
            }
        };
        let mut client = one_place_answering(&book, ONE_PLACE, 4096, respond);
        // Two requests in one write: hyper reads both, answers the first and
        // takes the second from its buffer, with no read in between.
        client.write_all(&GET.repeat(2)).await.expect("write");
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            book.take(ip("10.0.0.1")).err(),
            Some(FULL),
            "the place of a connection answering a request was given"
        );
        second.notify_one();
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn an_answer_still_being_written_keeps_its_place() {
        const BIG: &str = concat!("ok", include_str!("conn.rs"), include_str!("conn.rs"), "ok");
        let book = Book::new(ONE_PLACE.caps);
        // A client that reads slowly: the answer fills the 1 KiB pipe.
        let mut client = one_place(&book, ONE_PLACE, 1024, BIG);
        client.write_all(GET).await.expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            book.take(ip("10.0.0.1")).err(),
            Some(FULL),
            "the place of a connection still writing its answer was given"
        );
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(BIG.as_bytes()) {
            let n = client.read(&mut buf).await.expect("read the answer");
            assert_ne!(n, 0, "the answer was cut after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
    }

    /// Two places for remote connections, loopback counted as remote (the
    /// tests' clients are all on loopback).
    const TWO_PLACES: Limits = Limits {
        caps: Caps {
            max_connections: 2,
            loopback_exempt: false,
            ..Caps::DEFAULT
        },
        ..Limits::DEFAULT
    };

    /// An accept loop within [`TWO_PLACES`] on a free loopback port,
    /// running `serve` on each connection: its address, its refusal count,
    /// and the sender that stops it when dropped.
    async fn accepting<F, Fut>(serve: F) -> (SocketAddr, Arc<Refused>, watch::Sender<bool>)
    where
        F: Fn(TcpStream, Place) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let refused = Arc::new(Refused::default());
        let (stop, shutdown) = watch::channel(false);
        let counted = Arc::clone(&refused);
        tokio::spawn(accept_loop(
            listener, TWO_PLACES, "test", counted, shutdown, serve,
        ));
        (addr, refused, stop)
    }

    /// Over TCP through the accept loop (every client from one address):
    /// the connection idle longest is closed for a new one (it is woken
    /// from its idle wait to end), the others serve on.
    #[tokio::test]
    async fn over_tcp_a_full_listener_closes_the_connection_idle_longest() {
        let (addr, refused, _stop) = accepting(|tcp, place| async move {
            let answer = |_req| async { Response::new(Body::from("ok")) };
            let late = || Response::new(Body::from("late"));
            let _ = serve_http(tcp, place, TWO_PLACES, answer, late).await;
        })
        .await;
        let mut kept = Vec::new();
        for _ in 0..3 {
            let mut client = TcpStream::connect(addr).await.expect("connect");
            client.write_all(GET).await.expect("write");
            assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
            kept.push(client);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut buf = [0u8; 64];
        let first = tokio::time::timeout(Duration::from_secs(5), kept[0].read(&mut buf)).await;
        assert!(
            matches!(first, Ok(Ok(0)) | Ok(Err(_))),
            "the connection idle longest was not closed: {first:?}"
        );
        for client in &mut kept[1..] {
            client.write_all(GET).await.expect("write");
            assert!(answer(client).await.starts_with("HTTP/1.1 200"));
        }
        assert_eq!(refused.get(), 0);
    }

    /// One connection served in memory with the default limits; the
    /// client's end.
    fn served() -> tokio::io::DuplexStream {
        let (client, server) = tokio::io::duplex(4096);
        let answer = |_req| async { Response::new(Body::from("ok")) };
        let late = || Response::new(Body::from("late"));
        tokio::spawn(serve_http(
            server,
            Place::alone(),
            Limits::DEFAULT,
            answer,
            late,
        ));
        client
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: nodegate\r\n\r\n";

    /// Reads one answer (status line to the two-byte body) from `client`.
    async fn answer<S: AsyncRead + Unpin>(client: &mut S) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"\r\n\r\nok") {
            let n = client.read(&mut buf).await.expect("read an answer");
            assert_ne!(n, 0, "closed before a whole answer: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).to_string()
    }

    /// Whether the server closed `client` within `within`.
    async fn closed_within(client: &mut tokio::io::DuplexStream, within: Duration) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(within, client.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_connection_may_idle_past_the_head_timeout_but_not_for_ever() {
        let idle = Limits::DEFAULT.idle_timeout;
        let mut client = served();
        client.write_all(GET).await.expect("write");
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
        // The API server reuses an idle connection for up to 90 s: a review
        // sent after longer than the head timeout is still answered.
        tokio::time::sleep(Limits::DEFAULT.header_read_timeout * 3).await;
        client
            .write_all(GET)
            .await
            .expect("write after an idle spell");
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_secs(90)).await;
        client.write_all(GET).await.expect("write after 90 s idle");
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
        // Idle past the idle timeout: closed.
        assert!(!closed_within(&mut client, idle - Duration::from_secs(1)).await);
        assert!(closed_within(&mut client, Duration::from_secs(2)).await);
    }

    #[tokio::test]
    async fn a_head_larger_than_the_read_buffer_is_refused() {
        let mut client = served();
        let big = format!(
            "GET / HTTP/1.1\r\nHost: nodegate\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(READ_BUFFER)
        );
        // The server may close before the whole head is written.
        let _ = client.write_all(big.as_bytes()).await;
        let mut got = Vec::new();
        let _ = client.read_to_end(&mut got).await;
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 431"), "{got:?}");
        // Within the buffer, answered.
        let mut client = served();
        let fits = format!(
            "GET / HTTP/1.1\r\nHost: nodegate\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(READ_BUFFER / 2)
        );
        client.write_all(fits.as_bytes()).await.expect("write");
        assert!(answer(&mut client).await.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_must_be_whole_within_the_head_timeout_first_or_after_an_answer() {
        let head = Limits::DEFAULT.header_read_timeout;
        // A new connection that sends nothing.
        let mut silent = served();
        assert!(!closed_within(&mut silent, head - Duration::from_millis(100)).await);
        assert!(closed_within(&mut silent, Duration::from_millis(200)).await);
        // A new connection that trickles its first head.
        let mut trickling = served();
        let mut sent = 0;
        while sent < GET.len() - 1 && trickling.write_all(&GET[sent..=sent]).await.is_ok() {
            sent += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(closed_within(&mut trickling, head).await);
        assert!(
            sent <= 7,
            "{sent} bytes trickled, one each 500 ms, before the close"
        );
        // A kept-alive connection that trickles its next head after an idle
        // spell: the head timeout counts from its first byte.
        let mut kept = served();
        kept.write_all(GET).await.expect("write");
        answer(&mut kept).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        let mut closed = false;
        for b in GET[..20].iter() {
            if kept.write_all(&[*b]).await.is_err()
                || closed_within(&mut kept, Duration::from_millis(500)).await
            {
                closed = true;
                break;
            }
        }
        assert!(
            closed,
            "a trickled head held a kept-alive connection past the head timeout"
        );
    }

    /// The same clocks over TCP (writes vectored, as on every listener),
    /// with short limits and the real clock.
    #[tokio::test]
    async fn over_tcp_an_idle_spell_is_allowed_and_a_long_one_closes() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(2),
            ..Limits::DEFAULT
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            assert!(tcp.is_write_vectored());
            let answer = |_req| async { Response::new(Body::from("ok")) };
            let late = || Response::new(Body::from("late"));
            let _ = serve_http(tcp, Place::alone(), limits, answer, late).await;
        });
        let mut client = TcpStream::connect(addr).await.expect("connect");
        for spell in [Duration::ZERO, Duration::from_secs(1)] {
            tokio::time::sleep(spell).await;
            client.write_all(GET).await.expect("write");
            let got = answer(&mut client).await;
            assert!(
                got.starts_with("HTTP/1.1 200"),
                "after {spell:?} idle: {got:?}"
            );
        }
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "an idle connection was not closed: {closed:?}"
        );
    }

    #[tokio::test]
    async fn a_connection_beyond_the_cap_is_closed_at_once() {
        let held = Arc::new(tokio::sync::Notify::new());
        let release = Arc::clone(&held);
        let (addr, refused, _stop) = accepting(move |tcp, place| {
            let release = Arc::clone(&release);
            async move {
                release.notified().await;
                drop((tcp, place));
            }
        })
        .await;
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
