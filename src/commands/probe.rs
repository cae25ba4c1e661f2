//! `nodegate probe`: the kubelet's liveness and readiness probes, run inside
//! the container (an `exec` probe) against the controller's own
//! `--http-addr` over loopback, which no remote client can starve
//! (`serve::conn`). Needs no shell and no HTTP client in the image.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use crate::settings::cli::ProbeArgs;

/// The whole answer is read within this, as the kubelet's own timeout would.
const TIMEOUT: Duration = Duration::from_secs(2);
/// An answer is a status line and a short text; more is not read.
const MAX_ANSWER: u64 = 64 << 10;

/// Why a probe failed.
#[derive(Debug, PartialEq)]
enum Failed {
    /// No answer (exit 1).
    NoAnswer(String),
    /// An answer other than 200 (exit 3).
    Unhealthy(String),
}

/// Exit 0 when `PATH` answers 200, 1 when nothing answers, 3 when it
/// answers another status (the reason on stderr).
pub fn main(args: ProbeArgs) -> ExitCode {
    let (code, why) = match probe(args.addr, &args.path) {
        Ok(()) => return ExitCode::SUCCESS,
        Err(Failed::NoAnswer(why)) => (1, why),
        Err(Failed::Unhealthy(why)) => (3, why),
    };
    eprintln!("nodegate probe: http://{}{}: {why}", args.addr, args.path);
    ExitCode::from(code)
}

fn probe(addr: SocketAddr, path: &str) -> Result<(), Failed> {
    let no_answer = |what: &str, e: std::io::Error| Failed::NoAnswer(format!("{what}: {e}"));
    let mut tcp =
        TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| no_answer("cannot connect", e))?;
    tcp.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| tcp.set_write_timeout(Some(TIMEOUT)))
        .map_err(|e| no_answer("cannot set a timeout", e))?;
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: nodegate-probe\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| no_answer("cannot send the request", e))?;
    let mut answer = Vec::new();
    // A server that closes at once may reset the connection after its
    // answer: what arrived before the reset is the answer.
    if let Err(e) = tcp.take(MAX_ANSWER).read_to_end(&mut answer)
        && answer.is_empty()
    {
        return Err(no_answer(&format!("no answer within {TIMEOUT:?}"), e));
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .ok_or_else(|| Failed::NoAnswer("the answer has no status line".to_string()))?;
    if status == "200" {
        return Ok(());
    }
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    let body: Vec<&str> = body.lines().take(20).collect();
    Err(Failed::Unhealthy(format!(
        "HTTP {status}: {}",
        body.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server answering `answer` to the first request.
    fn serve(answer: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                // The whole head first, so that closing leaves nothing unread.
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(answer.as_bytes());
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
        });
        addr
    }

    #[test]
    fn a_200_passes_and_another_status_is_unhealthy_with_its_text() {
        let ok = serve("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
        assert_eq!(probe(ok, "/healthz"), Ok(()));
        let not_ready =
            serve("HTTP/1.1 503 Service Unavailable\r\n\r\n[!]leader no leader known\n");
        match probe(not_ready, "/readyz") {
            Err(Failed::Unhealthy(why)) => {
                assert!(
                    why.contains("503") && why.contains("no leader known"),
                    "{why}"
                )
            }
            other => panic!("a 503 is unhealthy: {other:?}"),
        }
    }

    #[test]
    fn nothing_listening_is_no_answer_and_says_so() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        match probe(addr, "/healthz") {
            Err(Failed::NoAnswer(why)) => assert!(why.contains("cannot connect"), "{why}"),
            other => panic!("nothing listens: {other:?}"),
        }
    }
}
